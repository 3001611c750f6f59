"""Voice cloning: the codec encoder, reference audio preparation, prompts with reference codes."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.config.requests import read_requests
from moss_cli.io.reference_audio import loudness_normalize
from moss_cli.model.codec import _Codebook
from moss_cli.model.config import QuantizerConfig
from moss_cli.pipeline import Synthesizer, SynthOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(SynthOptions(device="cpu"))


def test_encode_then_decode_round_trip_has_the_right_shapes_and_sample_count(codec):
    audio = torch.randn(2, 2, 5 * 3840 + 1000) * 0.1  # 5 whole frames and a partial one
    codes, lengths = codec.encode(audio, num_quantizers=6)
    assert codes.shape == (6, 2, 6) and lengths.tolist() == [5, 5]
    assert codes.min() >= 0 and codes.max() < 128
    decoded = codec.decode(codes[:, :, :5])
    assert decoded.shape == (2, 2, 5 * 3840)


def test_encoding_a_prefix_of_quantizers_keeps_the_leading_codes(codec):
    audio = torch.randn(1, 2, 4 * 3840) * 0.1
    all_codes, _ = codec.encode(audio, num_quantizers=8)
    some, _ = codec.encode(audio, num_quantizers=3)
    assert torch.equal(all_codes[:3], some)


def test_quantisation_picks_the_nearest_l2_normalised_codebook_entry():
    book = _Codebook(QuantizerConfig("rlfq", 2, 2, 2, 1, 3, 2))  # identity projections (rvq_dim == codebook_dim)
    with torch.no_grad():
        book.codebook.weight.copy_(torch.tensor([[10.0, 0.0], [0.0, 0.5], [-3.0, -3.0]]))
    # (0.1, 1) points up: nearest direction is entry 1 even though entry 0 is closer in plain distance.
    # (-1, -0.9) points down-left: entry 2.  (5, 0.1) points right: entry 0.
    z = torch.tensor([[[0.1, -1.0, 5.0], [1.0, -0.9, 0.1]]])  # [B=1, D=2, T=3]
    z_q, indices = book.quantize(z)
    assert indices.tolist() == [[1, 2, 0]]
    # The value returned is the unnormalised entry (projected out; identity here).
    torch.testing.assert_close(z_q[0, :, 0], torch.tensor([0.0, 0.5]))


def test_loudness_normalisation_moves_towards_minus_20_dbfs_by_at_most_3_db():
    quiet = torch.full((1, 1000), 0.01)  # -40 dBFS: gets the maximum +3 dB
    torch.testing.assert_close(loudness_normalize(quiet), quiet * 10 ** (3 / 20))
    near = torch.full((1, 1000), 0.08)  # about -21.9 dBFS: lifted to -20 exactly
    level = 10 * np.log10(float(loudness_normalize(near).pow(2).mean()) + 1e-9)
    assert level == pytest.approx(-20.0, abs=1e-4)


def test_reference_is_resampled_and_duplicated_to_the_codec_layout(synth):
    ref = synth.reference(EXAMPLES / "reference-voice.wav")  # 2 s, 24 kHz mono
    audio = ref.audio()
    assert ref.samples == 96000 and audio.shape == (2, 96000) and torch.equal(audio[0], audio[1])


def test_a_ref_audio_request_gets_reference_rows_carrying_its_encoded_codes(synth):
    requests = {r.id: r for r in read_requests(EXAMPLES / "voices.jsonl")}
    prepared = {p.request.id: p for p in synth.prepare(requests.values())}
    cfg = synth.talker_config
    clone = prepared["clone"]
    rows = synth.prompt(clone)
    assert rows.shape[0] == clone.prompt_length
    slot = (rows[:, 0] == cfg.audio_user_slot_token_id).nonzero().flatten()
    codes = rows[slot, 1:]  # the reference clip's codes, as the prompt carries them
    assert codes.shape == (25, cfg.n_vq)  # 2 s at 12.5 frames per second
    assert torch.equal(slot, torch.arange(int(slot[0]), int(slot[0]) + 25))  # one run of rows
    assert rows[slot[0] - 1, 0] == cfg.audio_start_token_id and rows[slot[-1] + 1, 0] == cfg.audio_end_token_id

    continued = synth.prompt(prepared["continue"])  # continuation: the voice follows audio_start
    assert continued.shape[0] == prepared["continue"].prompt_length
    assert torch.equal(continued[-25:, 1:], codes)
    assert torch.all(continued[-25:, 0] == cfg.audio_assistant_slot_token_id)
    assert continued[-26, 0] == cfg.audio_start_token_id


def test_identical_reference_files_are_encoded_once(tmp_path):
    copy = tmp_path / "copy.wav"
    copy.write_bytes((EXAMPLES / "reference-voice.wav").read_bytes())
    requests = tmp_path / "r.jsonl"
    requests.write_text(
        f'{{"id": "a", "text": "one", "ref_audio": "{EXAMPLES / "reference-voice.wav"}", '
        f'"max_new_frames": 3}}\n{{"id": "b", "text": "two", "ref_audio": "copy.wav", '
        f'"max_new_frames": 3}}\n{{"id": "c", "text": "three", "ref_audio": "copy.wav", '
        f'"max_new_frames": 3}}\n'
    )
    synth = Synthesizer(SynthOptions(device="cpu"))
    calls = []
    encode = synth.codec.encode
    synth.codec.encode = lambda *a, **k: calls.append(1) or encode(*a, **k)
    results = list(synth.run(synth.prepare(read_requests(requests))))
    assert len(results) == 3 and len(calls) == 1


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.wav", "does not exist"),
        (lambda d: (d / "junk.wav").write_bytes(b"RIFF not really audio") and d / "junk.wav", "not readable audio"),
        (lambda d: _write(d / "empty.wav", np.zeros((0, 1)), 16000), "is empty"),
        (lambda d: _write(d / "silent.wav", np.zeros((16000, 1)), 16000), "is silent"),
        (lambda d: _write(d / "long.wav", 0.1 * np.sin(np.arange(48000 * 70) / 7.0)[:, None], 48000), "max_model_len"),
        (
            lambda d: _write(d / "slow.wav", 0.1 * np.sin(np.arange(8000) / 3.0)[:, None], 4000),
            "unsupported sample rate",
        ),
    ],
)
def test_bad_references_are_rejected_at_validation_with_the_request_line(tmp_path, make, message):
    path = make(tmp_path)
    requests = tmp_path / "r.jsonl"
    requests.write_text(
        '{"id": "ok", "text": "fine"}\n' + f'{{"id": "bad", "text": "x", "ref_audio": "{path.name}"}}\n'
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["synth", str(requests), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "r.jsonl:2 [ref_audio]" in result.output.replace("\n", " ") and message in result.output.replace("\n", " ")
    assert not out.exists()


def _write(path: Path, samples: np.ndarray, rate: int) -> Path:
    sf.write(str(path), samples.astype(np.float32), rate, subtype="PCM_16")
    return path


def test_a_forgotten_reference_is_read_and_encoded_again_with_the_same_codes(synth, tmp_path):
    wav = tmp_path / "voice.wav"
    wav.write_bytes((EXAMPLES / "reference-voice.wav").read_bytes())
    reference = synth.voices.reference(wav)
    codes = synth.voices.codes(reference)
    assert synth.voices.reference(wav) is reference  # cached while it is in use
    synth.voices.forget(reference)
    again = synth.voices.reference(wav)
    assert again is not reference and again == reference
    assert torch.equal(synth.voices.codes(again), codes)
