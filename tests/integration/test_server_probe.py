"""Every --server command (synth, audit-determinism, bench) first asks the server what it is
(`SpeechClient.probe`: GET /v1/models, GET /moss/environment), each GET with a short timeout. A server
that takes connections and never answers fails within seconds, not after --timeout (300 s); and
what the server is decides which request-file fields are refused: vllm-omni's MOSS-TTS-Local drops
`instruction` and the audio_* sampling overrides without a word, moss serve honours them."""

import json
import time
from pathlib import Path

import pytest
import soundfile as sf
from cli_runs import flat, moss, write_rows  # tests/ is on sys.path
from serve_helpers import running
from speech_servers import silent
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni

from moss_cli.io.reference_audio import synthetic_voice
from moss_cli.pipeline import SynthOptions
from moss_cli.remote.client import PROBE_TIMEOUT_S

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "requests.jsonl"
# What each command needs besides --server; the audit and bench as short as they go.
COMMANDS = {
    "synth": lambda requests, tmp: ["synth", requests, "--out", tmp / "out"],
    "audit-determinism": lambda requests, tmp: ["audit-determinism", requests, "--scenarios", "repeat"],
    "bench": lambda requests, tmp: [
        "bench",
        "--requests",
        requests,
        "--concurrency",
        "1",
        "--arms",
        "seeded",
        "--num-requests",
        "1",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--no-stream",
    ],
}


def _fields_vllm_omni_drops(tmp_path: Path) -> Path:
    """Two requests with a voice (vllm-omni requires one) and the fields it drops."""
    voice = tmp_path / "voice.wav"
    sf.write(str(voice), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    rows = [
        {"id": "calm", "text": "Calmly.", "seed": 7, "max_new_frames": 6, "ref_audio": voice.name},
        {"id": "told", "text": "As told.", "seed": 8, "max_new_frames": 6, "ref_audio": voice.name},
    ]
    rows[0] |= {"instruction": "A calm, low voice.", "audio_temperature": 1.2, "audio_top_k": 20}
    return write_rows(tmp_path / "fields.jsonl", rows)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_server_that_never_answers_fails_within_seconds_naming_the_url(tmp_path, command):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "a", "text": "Hello.", "seed": 1, "max_new_frames": 4}])
    with silent() as url:
        began = time.monotonic()
        result = moss(*COMMANDS[command](requests, tmp_path), "--server", url)
        took = time.monotonic() - began
    output = flat(result.output)
    assert result.exit_code == 2, output
    assert f"{url}/v1/models: no answer within {PROBE_TIMEOUT_S:g} s" in output and "Traceback" not in output
    assert "is a speech server (vllm-omni, moss serve) up and ready there" in output
    assert took < 60, took  # not the 300 s of --timeout
    assert not (tmp_path / "out").exists()


def test_the_shipped_example_is_synthesised_by_moss_serve_with_the_fields_it_honours(tmp_path):
    with running(SynthOptions(device="cpu")) as (url, _):
        result = moss("synth", EXAMPLE, "--out", tmp_path / "out", "--server", url, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["requests"] == 8 and "drops" not in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_moss_serve_gets_the_fields_vllm_omni_drops_and_vllm_omni_refuses_them(tmp_path, command):
    requests = _fields_vllm_omni_drops(tmp_path)
    args = COMMANDS[command](requests, tmp_path)
    with running(SynthOptions(device="cpu")) as (url, _):
        honoured = moss(*args, "--server", url)
    assert honoured.exit_code == 0, honoured.output
    assert "--allow-dropped-fields" not in flat(honoured.output)
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        refused = moss(*args, "--server", url)
    output = flat(refused.output)
    assert refused.exit_code == 2, output
    for field in ("instruction", "audio_temperature", "audio_top_k"):
        assert f"fields.jsonl:1 [{field}]" in output, output
    assert "--allow-dropped-fields" in output and engine.received == []  # refused before any speech request
