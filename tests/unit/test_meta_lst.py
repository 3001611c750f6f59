"""Seed-TTS-eval's meta.lst as a request file: each line a voice-cloning request (the prompt wav as reference
audio, the prompt text as its transcript, the line's text), in the field counts its get_wav_res_ref_text.py
reads (2, 3, 4 and 5), paths relative to the list's folder; a line of another shape is a problem on its line."""

from pathlib import Path

import pytest

from moss_cli.config.requests import RequestFileError, read_requests

# The shape of the English test set's first line (seedtts_testset/en/meta.lst): utt|prompt text|prompt wav|text
LINES = [
    "common_voice_en_10119832-common_voice_en_10119840|We asked over twenty different people, and they all said "
    "it was his.|prompt-wavs/common_voice_en_10119832.wav|Get the trust fund to the bank early.",
    "five-fields|A prompt text.|prompt-wavs/b.wav|The fifth field names a wav.|wavs/five-fields.wav",
    "three-fields.wav|Only the text and a prompt wav.|prompt-wavs/b.wav",
    "two-fields|Just the text, no voice.",
]


def _write(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "prompt-wavs").mkdir()
    for name in ("common_voice_en_10119832.wav", "b.wav"):
        (tmp_path / "prompt-wavs" / name).write_bytes(b"RIFF")
    path = tmp_path / "meta.lst"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_every_field_count_of_seed_tts_eval_becomes_a_request(tmp_path):
    requests = {r.id: r for r in read_requests(_write(tmp_path, LINES))}
    first = requests["common_voice_en_10119832-common_voice_en_10119840"]
    assert first.text == "Get the trust fund to the bank early."
    assert first.ref_audio == tmp_path / "prompt-wavs" / "common_voice_en_10119832.wav"
    assert first.ref_text == "We asked over twenty different people, and they all said it was his."
    five = requests["five-fields"]
    assert (five.text, five.ref_text, five.ref_audio) == (
        "The fifth field names a wav.",
        "A prompt text.",
        tmp_path / "prompt-wavs" / "b.wav",
    )
    three = requests["three-fields"]  # its utt's .wav is dropped, as Seed-TTS-eval does
    assert (three.text, three.ref_text, three.ref_audio) == (
        "Only the text and a prompt wav.",
        None,
        tmp_path / "prompt-wavs" / "b.wav",
    )
    two = requests["two-fields"]
    assert (two.text, two.ref_text, two.ref_audio) == ("Just the text, no voice.", None, None)


def test_a_line_of_another_shape_is_named_by_its_line(tmp_path):
    path = _write(tmp_path, [LINES[0], "one field only", "a|b|c|d|e|f"])
    with pytest.raises(RequestFileError) as error:
        read_requests(path)
    said = error.value.describe()
    assert "meta.lst:2: " in said and "got 1" in said and "meta.lst:3: " in said and "got 6" in said
    assert "utt|prompt text|prompt wav|text" in said
