"""The shipped tiny talker hears its prompt: the text, the instruction and the reference voice each
change the codes, as with a trained model. Otherwise a bug that swapped outputs between requests,
or dropped a reference voice, would pass every audit and every test."""

from dataclasses import replace
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from moss_cli.config.builtin import builtin_requests
from moss_cli.config.requests import Request, read_requests
from moss_cli.io.reference_audio import synthetic_voice
from moss_cli.pipeline import Synthesizer, SynthOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VOICE = EXAMPLES / "reference-voice.wav"
TEXTS = [
    "Yes.",
    "No.",
    "Hi.",
    "Hello, and welcome to the reproducibility lab.",
    "Tomorrow will be cloudy with a chance of rain in the afternoon.",
    "Read this calmly.",
    "Read this slowly.",
]


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(SynthOptions(device="cpu"))


def _results(synth, requests):
    return {r.request.id: r for r in synth.run(synth.prepare(requests))}


def _codes(synth, requests):
    return {rid: r.codes for rid, r in _results(synth, requests).items()}


def _request(rid: str, text: str, **fields) -> Request:
    return Request(id=rid, text=text, line=1, seed=42, max_new_frames=24, **fields)


def _identical_pairs(outputs: dict) -> list[tuple[str, str]]:
    equal = torch.equal if isinstance(next(iter(outputs.values())), torch.Tensor) else np.array_equal
    return sorted(tuple(sorted((a, b))) for a, b in combinations(outputs, 2) if equal(outputs[a], outputs[b]))


def test_different_texts_with_the_same_seed_give_different_codes(synth):
    codes = _codes(synth, [_request(f"t{i}", text) for i, text in enumerate(TEXTS)])
    assert all(c.shape[0] > 0 for c in codes.values())
    assert _identical_pairs(codes) == []


def test_different_texts_give_different_greedy_codes(talker32):
    prompts = [talker32.prompt(text) for text in TEXTS]
    out = talker32.generate(*talker32.batch(prompts), max_new_frames=12, do_sample=False)
    assert _identical_pairs({text: codes for text, codes in zip(TEXTS, out)}) == []
    # Greedy decoding does not collapse onto one repeated frame either.
    assert all(len({tuple(frame) for frame in codes.tolist()}) > 6 for codes in out)


def test_an_instruction_changes_the_codes(synth):
    text = "Please read this sentence."
    codes = _codes(
        synth,
        [
            _request("plain", text),
            _request("calm", text, prompt_fields={"instruction": "Calm and slow."}),
            _request("low", text, prompt_fields={"instruction": "A calm, low voice."}),
        ],
    )
    assert _identical_pairs(codes) == []


def test_a_reference_voice_and_a_continuation_change_the_codes(synth, tmp_path):
    other = tmp_path / "other-voice.wav"
    sf.write(str(other), synthetic_voice(2.0, 24_000, 220.0), 24_000, subtype="PCM_16")
    text = "This sentence is spoken in the voice of the reference clip."
    codes = _codes(
        synth,
        [
            _request("no-voice", text),
            _request("clone", text, ref_audio=VOICE),
            _request("clone-other", text, ref_audio=other),
            _request("continue", text, ref_audio=VOICE, ref_text="Hello from the reference clip"),
            _request("no-voice-with-transcript", "Hello from the reference clip" + text),
        ],
    )
    assert _identical_pairs(codes) == []


def test_different_reference_clips_encode_to_different_reference_codes(synth, tmp_path):
    other = tmp_path / "other-voice.wav"
    sf.write(str(other), synthetic_voice(2.0, 24_000, 220.0), 24_000, subtype="PCM_16")

    def reference_codes(path: Path) -> torch.Tensor:  # as the request's prompt carries them
        [prepared] = synth.prepare([Request("r", "Hello.", 1, ref_audio=path)])
        rows = synth.prompt(prepared)
        return rows[rows[:, 0] == synth.talker_config.audio_user_slot_token_id, 1:]

    ours, theirs = (reference_codes(path) for path in (VOICE, other))
    assert ours.shape == theirs.shape
    assert (ours != theirs).float().mean() > 0.5


def test_builtin_audit_requests_all_differ_except_the_identical_twins(synth):
    requests = builtin_requests()
    twins = {r.id for r in requests if r.id.startswith("twin-")}
    assert len(twins) == 2 and len({(r.text, r.seed, r.max_new_frames) for r in requests if r.id in twins}) == 1
    codes = _codes(synth, requests)
    assert _identical_pairs(codes) == [tuple(sorted(twins))]


def _what_it_asks(request: Request) -> Request:
    """A request without its id and line: two requests asking the same thing compare equal."""
    return replace(request, id="", line=0)


@pytest.mark.parametrize("name", ["requests.jsonl", "voices.jsonl"])
def test_example_requests_give_different_audio_unless_they_ask_the_same(synth, name):
    requests = read_requests(EXAMPLES / name)
    results = _results(synth, requests)
    same = {tuple(sorted((a.id, b.id))) for a, b in combinations(requests, 2) if _what_it_asks(a) == _what_it_asks(b)}
    assert _identical_pairs({rid: r.pcm for rid, r in results.items()}) == sorted(same)
