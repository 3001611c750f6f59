"""measures/speech.py on Debian espeak-ng's speech, made at test time (scripts/setup.sh --tests
installs espeak-ng and the speech extra; each test that needs them skips, with the reason, where
they are missing)."""

import importlib.util
import io
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import torch

from moss_cli.errors import MossError
from moss_cli.measures.speech import DIFF_SIDES, INSTALL, SpeechThresholds, judge_speech, require_speech

TEXT = "These days a chicken leg is a rare dish."
OTHER = "Rice is often served in round bowls."
missing = [name for name in ("librosa",) if importlib.util.find_spec(name) is None]
needs_speech = pytest.mark.skipif(
    bool(missing) or shutil.which("espeak-ng") is None,
    reason=f"needs espeak-ng on PATH and the speech extra ({INSTALL}); missing: "
    + ", ".join(missing + ([] if shutil.which("espeak-ng") else ["espeak-ng"])),
)


def espeak(text: str, *options: str) -> tuple[np.ndarray, int]:
    """int16 [samples, 1] and the rate of espeak-ng reading `text`."""
    wav = subprocess.run(["espeak-ng", "--stdout", *options, text], capture_output=True, check=True).stdout
    return sf.read(io.BytesIO(wav), dtype="int16", always_2d=True)


@pytest.fixture(scope="module")
def reference():
    return espeak(TEXT)


def test_an_identical_clip_is_the_same_speech_without_measuring():
    clip = np.random.default_rng(0).integers(-3000, 3000, (24000, 1), dtype=np.int16)
    judged = judge_speech(clip, clip.copy(), 24000)
    assert judged.same and judged.failed is None and judged.measures == [] and judged.durations == (1.0, 1.0)


@needs_speech
def test_the_same_sentence_at_another_rate_and_pitch_is_the_same_speech(reference):
    clip, rate = reference
    for options in (["-s", "200"], ["-p", "70"]):
        judged = judge_speech(clip, espeak(TEXT, *options)[0], rate)
        assert judged.same and judged.failed is None, judged.as_dict()
        names = [m.name for m in judged.measures]
        assert names == ["rms-dbfs", "clipped-fraction", "spectral-flatness", "duration-ratio", "mfcc-dtw"]
        assert all(m.passed for m in judged.measures)


@needs_speech
def test_speech_padded_with_digital_silence_is_the_same_speech(reference):
    """A response with exact zeros before and after its words (a codec's padding) is still speech:
    spectral flatness is measured over the frames that sound (a frame of zeros has flatness 1)."""
    clip, rate = reference
    silence = np.zeros((2 * rate, 1), dtype=np.int16)
    judged = judge_speech(clip, np.concatenate([silence, clip, silence]), rate)
    assert judged.same and judged.failed is None, judged.as_dict()


@needs_speech
def test_half_of_the_words_fail_the_duration_ratio(reference):
    clip, rate = reference
    judged = judge_speech(clip, espeak("These days a chicken")[0], rate)
    assert not judged.same and judged.failed == "duration-ratio"
    ratio = next(m for m in judged.measures if m.name == "duration-ratio")
    assert ratio.value < ratio.threshold == SpeechThresholds().min_duration_ratio
    assert judged.durations[1] < judged.durations[0]


@needs_speech
def test_another_sentence_fails_the_mfcc_dtw_or_the_duration_ratio(reference):
    clip, rate = reference
    judged = judge_speech(clip, espeak(OTHER)[0], rate)
    assert not judged.same and judged.failed in ("duration-ratio", "mfcc-dtw")
    cost = next(m for m in judged.measures if m.name == "mfcc-dtw")
    assert not cost.passed and cost.value > cost.threshold


@needs_speech
def test_a_judgement_names_its_two_clips_in_the_words_of_its_report(reference):
    """The audit's and the bench's: a response alone and one here; moss diff's: the request in A and in B."""
    clip, rate = reference
    other = espeak(TEXT, "-s", "200")[0]
    audit = judge_speech(clip, other, rate)
    diff = judge_speech(clip, other, rate, sides=DIFF_SIDES)
    assert f"{audit.durations[0]:.2f} s alone, {audit.durations[1]:.2f} s here" in audit.describe()
    said = diff.describe()
    assert f"{diff.durations[0]:.2f} s in A, {diff.durations[1]:.2f} s in B" in said
    assert "alone" not in said and " here" not in said and diff.as_dict()["sides"] == ["in A", "in B"]


@needs_speech
def test_silence_clipping_and_noise_fail_the_sanity_check(reference):
    clip, rate = reference
    loud = np.clip(clip.astype(np.int32) * 20, -32767, 32767).astype(np.int16)
    noise = np.random.default_rng(0).normal(0, 3000, clip.shape).astype(np.int16)
    empty = np.zeros((0, 1), dtype=np.int16)  # a server's answer when the first frame stops
    for other, measure in [
        (np.zeros_like(clip), "rms-dbfs"),
        (empty, "rms-dbfs"),
        (loud, "clipped-fraction"),
        (noise, "spectral-flatness"),
    ]:
        judged = judge_speech(clip, other, rate)
        assert judged.failed == "sanity", (measure, judged.as_dict())
        assert not next(m for m in judged.measures if m.name == measure).passed


@needs_speech
def test_every_layout_of_a_clip_is_judged_alike_and_the_judgement_is_json(reference):
    clip, rate = reference
    other = espeak(TEXT, "-p", "70")[0]
    as_pcm = judge_speech(clip, other, rate)  # int16 [samples, channels], as Outcome.pcm
    as_waveform = judge_speech(  # float [channels, samples], as Outcome.waveform
        torch.from_numpy(clip.T / 32767.0).float(), torch.from_numpy(other.T / 32767.0).float(), rate
    )
    assert [m.passed for m in as_pcm.measures] == [m.passed for m in as_waveform.measures]
    assert as_pcm.durations == as_waveform.durations
    document = json.loads(json.dumps(as_pcm.as_dict()))
    assert document["same"] and document["measures"][-1]["name"] == "mfcc-dtw"
    assert document["measures"][-1]["passed"] is True


def test_without_the_speech_extra_the_install_line_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "librosa", None)  # an import of it raises ImportError
    with pytest.raises(MossError, match="pip install librosa") as error:
        require_speech()
    assert error.value.field == "--level"


@pytest.mark.skipif(importlib.util.find_spec("librosa") is None, reason="needs the speech extra (librosa)")
def test_a_read_only_librosa_compiles_into_the_users_cache_once(monkeypatch, tmp_path):
    import os

    from moss_cli.measures import speech

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    speech._numba_cache()
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "moss-numba")
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/elsewhere")  # the user's own choice stands
    speech._numba_cache()
    assert os.environ["NUMBA_CACHE_DIR"] == "/elsewhere"


@needs_speech
def test_exact_silence_and_broken_samples_are_verdicts_never_errors(reference):
    """A clip of exact digital silence as long as the reference made the MFCC-DTW's cosine cost NaN, which
    librosa's DTW refused with a ParameterError; NaN or infinite float samples are no sound either."""
    clip, rate = reference
    for other in (np.zeros_like(clip), np.zeros((clip.shape[0] // 2, 1), dtype=clip.dtype)):
        judged = judge_speech(clip, other, rate)
        assert not judged.same and judged.failed == "sanity"
        assert next(m for m in judged.measures if m.name == "mfcc-dtw").value is not None
    both = judge_speech(np.zeros_like(clip), np.zeros((clip.shape[0] + 5, 1), dtype=clip.dtype), rate)
    assert not both.same and both.failed == "sanity"
    broken = clip.astype(np.float32) / 32767
    broken[100:200], broken[300] = np.nan, np.inf
    assert judge_speech(clip, broken, rate).same
