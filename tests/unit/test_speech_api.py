"""The speech API's field mapping: a request sent by a client reads back as the same request."""

from pathlib import Path

from moss_cli.config.request_fields import Problem, make_request
from moss_cli.config.requests import Request
from moss_cli.serve.protocol import read_speech, record_of
from moss_cli.speech_api import body_from_request


def _read_back(body):
    asked, problems = record_of(read_speech(body))
    assert problems == []
    found: list[Problem] = []
    request = make_request(
        found,
        1,
        id="x",
        text=asked.text,
        seed=asked.seed,
        max_new_frames=asked.max_new_frames,
        prompt_fields=asked.prompt_fields,
        sampling=asked.sampling,
        ref_text=asked.ref_text,
    )
    assert found == []
    return request


def test_a_request_survives_the_trip_through_a_body():
    request = Request(
        id="x",
        text="Hello there.",
        line=1,
        seed=0,  # an explicit seed 0 is a seed
        max_new_frames=30,
        prompt_fields={"instruction": "calm", "language": "English", "quality": "high", "tokens": 40},
        sampling={"audio_temperature": 1.2, "audio_top_k": 10},
    )
    body = body_from_request(request)
    assert body["input"] == "Hello there." and body["max_new_tokens"] == 30 and body["seed"] == 0
    assert body["instructions"] == "calm" and body["extra_params"] == {"quality": "high", "tokens": 40}
    back = _read_back(body)
    assert (back.text, back.seed, back.max_new_frames) == (request.text, 0, 30)
    assert back.prompt_fields == request.prompt_fields
    assert back.sampling == request.sampling


def test_probes_replace_or_drop_the_seed():
    request = Request(id="x", text="t", line=1, seed=5)
    assert body_from_request(request, seed=6)["seed"] == 6
    assert "seed" not in body_from_request(request, with_seed=False)


def test_reference_audio_travels_as_a_data_uri(tmp_path: Path):
    wav = tmp_path / "voice.wav"
    wav.write_bytes(b"RIFF0000WAVE")
    body = body_from_request(Request(id="x", text="t", line=1, ref_audio=wav))
    assert body["ref_audio"] == "data:audio/wav;base64,UklGRjAwMDBXQVZF"


def test_unknown_fields_are_named_with_a_hint():
    _, problems = record_of(read_speech({"input": "t", "inptu": "typo", "extra_params": {"colour": 1}}))
    assert ("inptu", "unknown field; did you mean 'input'?") in problems
    assert any(field == "extra_params.colour" for field, _ in problems)
