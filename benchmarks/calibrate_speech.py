"""The figures behind the speech level's thresholds (docs/speech-level.md): each measure of
measures/speech.py over pairs of Debian espeak-ng clips, a reference (en-us, rate 175, pitch 50)
against a variant of it, grouped by kind, with how many pairs the default thresholds judge the
same speech and which check failed the others.

    .venv/bin/python benchmarks/calibrate_speech.py [--sentences N]

Needs espeak-ng on PATH and the speech extra's librosa (pip install librosa). The word check's figures:
benchmarks/calibrate_words.py."""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import soundfile as sf
from harvard import HARVARD  # benchmarks/, beside this script

from moss_cli.measures.speech import judge_speech

SENTENCES = HARVARD[:8] + [  # and two longer ones, as a TTS request would be
    "A large size in stockings is hard to sell, so the shop keeps only a few of them on the shelf.",
    "The small pup gnawed a hole in the sock, and then it slept the whole afternoon by the warm fire.",
]
# Kinds of variant, the same speech first; the last column of the table is what the level should say.
SAME = ("rate 150-200", "rate 120-250", "pitch 30-80", "noise at 20 dB SNR", "noise at 10 dB SNR", "resampled 16 kHz")
OTHER = ("half of the words", "another sentence", "another voice", "silence", "white noise", "clipped (x20)")


def espeak(text: str, *options: str) -> tuple[np.ndarray, int]:
    """int16 [samples] and the rate of espeak-ng reading `text`."""
    wav = subprocess.run(["espeak-ng", "--stdout", *options, text], capture_output=True, check=True).stdout
    data, rate = sf.read(io.BytesIO(wav), dtype="int16")
    return data, rate


def with_noise(x: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    power = np.mean(x.astype(np.float64) ** 2)
    noise = rng.normal(0.0, np.sqrt(power / 10 ** (snr_db / 10)), x.shape)
    return np.clip(x + noise, -32768, 32767).astype(np.int16)


def variants(text: str, others: list[str], rate: int, rng: np.random.Generator):
    """(kind, clip) pairs for one reference sentence."""
    import soxr

    clip = espeak(text)[0]
    for speed in (150, 160, 190, 200):
        yield "rate 150-200", espeak(text, "-s", str(speed))[0]
    for speed in (120, 250):
        yield "rate 120-250", espeak(text, "-s", str(speed))[0]
    for pitch in (30, 80):
        yield "pitch 30-80", espeak(text, "-p", str(pitch))[0]
    yield "noise at 20 dB SNR", with_noise(clip, 20, rng)
    yield "noise at 10 dB SNR", with_noise(clip, 10, rng)
    down = soxr.resample(clip.astype(np.float32) / 32767, rate, 16000)
    yield "resampled 16 kHz", (np.clip(soxr.resample(down, 16000, rate), -1, 1) * 32767).astype(np.int16)
    words = text.split()
    yield "half of the words", espeak(" ".join(words[: len(words) // 2]))[0]
    for other in others:
        yield "another sentence", espeak(other)[0]
    for voice in ("en-gb-scotland", "en-us+f3", "en-gb-x-rp"):
        yield "another voice", espeak(text, "-v", voice)[0]
    yield "silence", np.zeros_like(clip)
    yield "white noise", rng.normal(0, 3000, clip.shape).astype(np.int16)
    yield "clipped (x20)", np.clip(clip.astype(np.int32) * 20, -32767, 32767).astype(np.int16)


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3f}-{max(values):.3f} (median {statistics.median(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=len(SENTENCES), help="how many reference sentences")
    args = parser.parse_args()
    if shutil.which("espeak-ng") is None:
        sys.exit("espeak-ng is not on PATH (Debian: apt-get install espeak-ng)")
    rng = np.random.default_rng(0)
    sentences = SENTENCES[: args.sentences]
    rate = espeak("warm up")[1]
    judge_speech(*(espeak(s)[0] for s in sentences[:2]), rate)  # imports, JIT
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    same, failed, checked, cpu = Counter(), defaultdict(Counter), Counter(), []
    for text in sentences:
        reference = espeak(text)[0]
        for kind, clip in variants(text, [s for s in sentences if s != text], rate, rng):
            start = time.process_time()
            judgement = judge_speech(reference, clip, rate)
            cpu.append(time.process_time() - start)
            checked[kind] += 1
            same[kind] += judgement.same
            failed[kind][judgement.failed or "-"] += 1
            for m in judgement.measures:
                if m.value is not None:
                    values[kind][m.name].append(m.value)
    print(f"{len(sentences)} sentences, {sum(checked.values())} pairs, espeak-ng at {rate} Hz")
    print(f"CPU per pair: median {statistics.median(cpu):.3f} s, max {max(cpu):.3f} s\n")
    columns = ["variant", "pairs", "duration ratio", "MFCC-DTW cost", "spectral flatness", "judged same"]
    print("| " + " | ".join([*columns, "failed check"]) + " |")
    print("|---|---|---|---|---|---|---|")
    for kind in SAME + OTHER:
        v, n = values[kind], checked[kind]
        fails = ", ".join(f"{check} {count}" for check, count in failed[kind].most_common() if check != "-") or "-"
        print(
            f"| {kind} | {n} | {spread(v['duration-ratio'])} | {spread(v['mfcc-dtw'])} "
            f"| {spread(v['spectral-flatness'])} | {same[kind]}/{n} | {fails} |"
        )


if __name__ == "__main__":
    main()
