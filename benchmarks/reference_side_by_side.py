"""moss's engine next to the OpenMOSS reference `generate()`, in one process, on the same weights.

    PYTHON_WITH_TRANSFORMERS benchmarks/reference_side_by_side.py --reference-path DIR \
        [--reference-module moss_ref] [--preset 35m|tiny|v1.5] [--batch 1,8] [--frames 40] [--repeats 3] \
        [--threads 1] [--json F]

Run it with an interpreter that has `transformers` and the reference code (OpenMOSS/MOSS-TTS,
folder moss_tts_local_v1.5, importable from `--reference-path` as `--reference-module`); the
reference is never part of this repository. moss is imported from this checkout. The reference
package's `__init__` also imports its processor, which needs torchaudio; where there is none (no
build for the installed torch), a folder of links to the reference's modules with an `__init__`
that imports only `MossTTSLocalConfig` and `MossTTSLocalModel` serves as the module. A random
checkpoint of the preset's shapes is written to a temporary folder with a stop head that never
fires, loaded by both, and every variant decodes the same prompts for the same number of frames
at the published sampling defaults (1.7 / 0.8 / 25). Variants alternate within each repeat;
figures are medians, in frames per second of wall time including prefill, and of decode alone: each
repeat also runs every variant for one frame, and the difference of the two runs is the time of the
other frames (the prefill, the same work for all, cancels out).

`--preset v1.5` (the published v1.5 shapes, 4.1 B parameters, bfloat16) writes no checkpoint: two
8 GB copies do not fit in memory here. moss builds random weights as `moss bench --random-weights
v1.5` does, with the same never-firing stop head, and the reference model is assembled on the meta
device and given moss's very tensors (the parameter names are the same); moss then packs its
linear weights for oneDNN as it does when it loads a talker (about 16 GB in all).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from moss_cli.api import load_talker  # noqa: E402
from moss_cli.assets.build import CodecSizes, TalkerSizes, build  # noqa: E402
from moss_cli.bench import BenchOptions  # noqa: E402
from moss_cli.bench.models import load_models  # noqa: E402
from moss_cli.engine.requests import GenerationRequest  # noqa: E402
from moss_cli.engine.scheduler import Engine  # noqa: E402
from moss_cli.numerics import FAST, INVARIANT  # noqa: E402
from moss_cli.numerics.layout import EngineLayout  # noqa: E402
from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS  # noqa: E402

PRESETS = {
    "tiny": TalkerSizes(),
    "35m": TalkerSizes(
        hidden=512, layers=8, heads=8, kv_heads=4, ffn=1536, local_heads=8, local_ffn=1536, n_vq=12, codebook=1024
    ),
}
SHARED = {"v1.5"}  # presets run on one shared copy of random weights (see the module's docstring)
TEXTS = ["A benchmark sentence of ordinary length, read at an even pace.", "Short one.", "Another request here."]


def reference_run(model, prompts, frames: int) -> None:
    rows = [p for p in prompts]
    width = max(p.shape[0] for p in rows)
    pad = model.config.audio_pad_code if hasattr(model.config, "audio_pad_code") else model.config.audio_pad_token_id
    ids = torch.full((len(rows), width, rows[0].shape[1]), pad, dtype=torch.long)
    ids[:, :, 0] = model.config.pad_token_id
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, p in enumerate(rows):  # left padding, as the reference processor does
        ids[i, width - p.shape[0] :] = p
        mask[i, width - p.shape[0] :] = True
    model.generate(
        ids,
        mask,
        max_new_frames=frames,
        do_sample=True,
        audio_temperature=1.7,
        audio_top_p=0.8,
        audio_top_k=25,
        audio_repetition_penalty=1.0,
    )


@torch.no_grad()
def shared_models(ref, preset: str, tmp: Path):
    """(moss model, prompt function, reference model) on one copy of random bfloat16 weights."""
    # compile=True: weights left plain here, for the reference; moss packs its own copy at the end
    model, _, prompts, _ = load_models(
        BenchOptions(random_weights=preset, compile=True), torch.device("cpu"), torch.bfloat16
    )
    head = model.local_text_lm_head.weight.float()
    direction = head[0] - head[1]  # continue minus stop: shift ln_f's output along it so stop never fires
    model.local_transformer.ln_f.bias += (direction * (50.0 / direction.dot(direction))).to(torch.bfloat16)
    raw = dict(model.cfg.raw)
    (tmp / "config.json").write_text(json.dumps(raw))
    config = ref.MossTTSLocalConfig.from_pretrained(tmp, attn_implementation="sdpa")
    with torch.device("meta"):
        reference = ref.MossTTSLocalModel(config)
    missing, unexpected = reference.load_state_dict(model.state_dict(), strict=False, assign=True)
    reference.tie_weights()
    for module in reference.modules():
        if hasattr(module, "_compute_inv_freq"):  # non-persistent rotary buffers, still on meta
            module.inv_freq = module._compute_inv_freq(torch.device("cpu"))
    left = [name for name, t in [*reference.named_parameters(), *reference.named_buffers()] if t.is_meta]
    if unexpected or left:
        raise SystemExit(f"the reference does not take moss's tensors: unexpected {unexpected}, unset {left}")
    model.pack_weights()  # a packed copy of each linear weight for moss (as moss loads a talker); ~8 GB more
    return model, prompts.build, reference.eval()


def moss_run(model, numerics, prompts, frames: int) -> None:
    requests = [
        GenerationRequest(str(i), p, frames, AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS, rng=i) for i, p in enumerate(prompts)
    ]
    layout = EngineLayout.fix(model, numerics, len(prompts))
    list(Engine(model, max_batch=len(prompts), layout=layout).run(requests))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-path", type=Path, required=True)
    parser.add_argument("--reference-module", default="moss_ref")
    parser.add_argument("--preset", choices=sorted({*PRESETS, *SHARED}), default="35m")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(args.reference_path))
    ref = importlib.import_module(args.reference_module)

    with tempfile.TemporaryDirectory() as tmp:
        if args.preset in SHARED:
            model, prompt, reference = shared_models(ref, args.preset, Path(tmp))
        else:
            talker_dir, _ = build(Path(tmp), PRESETS[args.preset], CodecSizes(), stop_margin=50.0)
            config = ref.MossTTSLocalConfig.from_pretrained(talker_dir, attn_implementation="sdpa")
            reference = ref.MossTTSLocalModel.from_pretrained(talker_dir, config=config, dtype=torch.float32).eval()
            talker = load_talker(talker_dir, device="cpu", dtype="float32")
            model, prompt = talker.model, talker.prompt
        variants = {
            "reference generate()": lambda p, frames: reference_run(reference, p, frames),
            "moss invariant": lambda p, frames: moss_run(model, INVARIANT, p, frames),
            "moss fast": lambda p, frames: moss_run(model, FAST, p, frames),
        }
        results = {}
        with torch.inference_mode():
            for batch in (int(b) for b in args.batch.split(",")):
                prompts = [prompt(TEXTS[i % len(TEXTS)]) for i in range(batch)]
                for run in variants.values():
                    run(prompts[:1], 2)  # warm-up
                times = {name: [] for name in variants}
                decode = {name: [] for name in variants}  # seconds of the frames after the first
                for _ in range(args.repeats):
                    for name, run in variants.items():
                        start = time.perf_counter()
                        run(prompts, args.frames)
                        middle = time.perf_counter()
                        run(prompts, 1)  # the prefill and one frame: what the difference leaves is decode
                        times[name].append(middle - start)
                        decode[name].append(max(2 * middle - start - time.perf_counter(), 1e-9))
                for name, values in times.items():
                    fps = batch * args.frames / statistics.median(values)
                    spread = (batch * args.frames / max(values), batch * args.frames / min(values))
                    steps = [batch * (args.frames - 1) / d for d in decode[name]]
                    results.setdefault(str(batch), {})[name] = {
                        "frames_per_s": round(fps, 2),
                        "range": [round(x, 2) for x in spread],
                        "decode_frames_per_s": round(statistics.median(steps), 2),
                        "decode_range": [round(min(steps), 2), round(max(steps), 2)],
                    }
                    print(
                        f"B={batch:<3} {name:<22} {fps:8.1f} frames/s  [{spread[0]:.1f}-{spread[1]:.1f}]"
                        f"   decode alone {statistics.median(steps):8.1f} frames/s  [{min(steps):.1f}-{max(steps):.1f}]"
                    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "preset": args.preset,
                    "frames": args.frames,
                    "repeats": args.repeats,
                    "threads": args.threads,
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
