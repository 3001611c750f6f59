"""The speech-API client behind `--server`: every way a server can fail is a clear exit 2 naming
the request and the status; re-sends are reported; auth headers never reach any output."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from cli_runs import write_rows
from speech_servers import (  # tests/ is on sys.path
    RATE,
    Behaviour,
    plain_web_server,
    resetting,
    serving,
    synthesize,
    unused_port,
)
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.errors import MossError
from moss_cli.io.outcome import Outcome
from moss_cli.remote.reply import NotAudio, decode_audio
from moss_cli.remote.settings import ServerOptions, parse_headers, public_url, redact

runner = CliRunner()


def _requests(tmp_path: Path, n: int = 2) -> Path:
    rows = [{"id": f"r{i}", "text": f"Request number {i}.", "seed": i, "max_new_frames": 3} for i in range(n)]
    return write_rows(tmp_path / "r.jsonl", rows)


def _synth(requests: Path, out: Path, url: str, *extra):
    return runner.invoke(app, ["synth", str(requests), "--out", str(out), "--server", url, *map(str, extra)])


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    "behaviour, expected",
    [
        (Behaviour(status=500), "HTTP 500 Internal Server Error: the fake server answers 500"),
        (Behaviour(status=404), "HTTP 404 Not Found: the fake server answers 404"),
        (Behaviour(json_200=True), "HTTP 200, but the body is not wav audio: application/json"),
    ],
)
def test_an_error_answer_exits_2_naming_the_request_the_status_and_the_servers_words(tmp_path, behaviour, expected):
    with serving(behaviour) as url:
        result = _synth(_requests(tmp_path), tmp_path / "out", url)
    assert result.exit_code == 2
    message = _one_line(result.output)
    assert expected in message and "request 'r" in message and "Traceback" not in result.output
    assert not list((tmp_path / "out").glob("*.wav"))


def test_a_refused_connection_exits_2_says_so_and_writes_nothing(tmp_path):
    result = _synth(_requests(tmp_path), tmp_path / "out", f"http://127.0.0.1:{unused_port()}")
    assert result.exit_code == 2
    assert "cannot connect" in _one_line(result.output) and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # no request succeeded: no folder, no header-only manifest


def test_an_html_error_page_is_quoted_by_one_line_and_nothing_is_written(tmp_path):
    with plain_web_server() as url:
        result = _synth(_requests(tmp_path), tmp_path / "out", url)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "HTTP 501 Unsupported method ('POST'): 'Error response' (first line of the body)" in _one_line(result.output)
    assert "<" not in result.output and len(result.output.splitlines()) <= 3
    assert not (tmp_path / "out").exists()


def test_a_server_slower_than_the_timeout_exits_2_naming_the_request(tmp_path):
    with serving(Behaviour(hold_s=1.0)) as url:
        result = _synth(_requests(tmp_path, 1), tmp_path / "out", url, "--timeout", "0.3")
    assert result.exit_code == 2
    assert "request 'r0' (synth)" in _one_line(result.output)
    assert "no answer within 0.3 s (--timeout)" in _one_line(result.output)


def test_5xx_answers_are_re_sent_up_to_retries_and_each_re_send_is_reported(tmp_path):
    with serving(Behaviour(fail_first=2)) as url:
        result = _synth(_requests(tmp_path), tmp_path / "out", url, "--retries", "2", "--concurrency", "1")
    assert result.exit_code == 0, result.output
    reported = [line for line in result.output.splitlines() if line.startswith("retry:")]
    assert len(reported) == 2 and all("HTTP 503" in line for line in reported)
    assert len(list((tmp_path / "out").glob("*.wav"))) == 2


def test_a_reset_connection_is_re_sent_and_reported_then_an_error_naming_the_request(tmp_path):
    with resetting() as url:
        result = _synth(_requests(tmp_path, 1), tmp_path / "out", url, "--retries", "1")
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert sum(line.startswith("retry:") for line in lines) == 1
    message = _one_line(result.output)
    assert "request 'r0' (synth)" in message and "connection lost" in message and "(after 2 attempts)" in message


def test_without_retries_a_503_is_an_error_and_4xx_is_never_re_sent(tmp_path):
    with serving(Behaviour(fail_first=1)) as url:
        assert _synth(_requests(tmp_path), tmp_path / "a", url, "--concurrency", "1").exit_code == 2
    behaviour = Behaviour(status=422)
    with serving(behaviour) as url:
        result = _synth(_requests(tmp_path, 1), tmp_path / "b", url, "--retries", "3")
    assert result.exit_code == 2 and len(behaviour.seen) == 1 and "retry:" not in result.output


def test_auth_headers_and_url_credentials_never_reach_the_terminal_or_any_report(tmp_path, monkeypatch):
    token, password, key = "s3cret-token-value", "pw-hidden-value", "query-key-value"
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    behaviour = Behaviour(token=token, moss_headers=True)
    with serving(behaviour) as url:
        audit = runner.invoke(
            app,
            [
                "audit-determinism",
                str(_requests(tmp_path)),
                "--server",
                f"{url}/?key={key}",  # a gateway's key in the query
                "--header",
                f"Authorization: Bearer {token}",
                "--scenarios",
                "repeat,concurrent",
                "--report-dir",
                str(tmp_path / "report"),
            ],
        )
        wrong = _synth(_requests(tmp_path), tmp_path / "a", url, "--header", "Authorization: Bearer wrong-one-123")
        basic = _synth(_requests(tmp_path), tmp_path / "b", url.replace("http://", f"http://user:{password}@"))
    assert audit.exit_code == 0, audit.output
    assert behaviour.headers_seen[0]["authorization"] == f"Bearer {token}"  # they were sent
    assert behaviour.queries_seen[0] == f"key={key}"
    # The server echoes what it got; the client blanks it out (a token, or basic auth's base64).
    assert wrong.exit_code == basic.exit_code == 2 and "HTTP 401" in wrong.output and "HTTP 401" in basic.output
    assert "wrong-one-123" not in wrong.output and "dXNlcjpwdy1oaWRkZW4tdmFsdWU" not in basic.output
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".xml", ".md", ".html")]
    assert {p.name for p in written} >= {"audit.json", "junit.xml", "summary.md", "step-summary.md", "index.html"}
    for text in [audit.output, basic.output, *(p.read_text() for p in written)]:
        assert token not in text and password not in text and key not in text


def test_a_malformed_header_is_refused_without_echoing_its_value():
    with pytest.raises(Exception) as error:
        parse_headers(["Authorization Bearer secret-xyz"])
    assert "--header #1" in str(error.value) and "secret-xyz" not in str(error.value)


def test_public_url_drops_credentials_and_query():
    assert public_url("https://me:pw@example.com:8443/tts/?key=abc") == "https://example.com:8443/tts"
    command = "moss synth --server 'https://me:pw@example.com:8443/tts?key=abc&flag#t' --header 'X-Key: ab'"
    assert redact("a server's words: password 'Qz' refused; Qzx, aQz", ["Qz"]) == (
        "a server's words: password '***' refused; Qzx, aQz"  # a short secret, where it stands alone
    )
    assert redact(command, ["ab"]) == (
        "moss synth --server 'https://***:***@example.com:8443/tts?key=***&***#***' --header 'X-Key: ***'"
    )


def test_raw_pcm_decodes_with_the_given_rate_and_channels_and_odd_bodies_are_refused():
    pcm = synthesize("pcm", 1, 2)
    decoded, rate = decode_audio(pcm.tobytes(), "pcm", "audio/pcm", sample_rate=RATE, channels=1)
    assert rate == RATE and np.array_equal(decoded, pcm)
    with pytest.raises(NotAudio, match="not whole 16-bit samples of 2 channel"):
        decode_audio(pcm.tobytes()[:-2], "pcm", "audio/pcm", sample_rate=RATE, channels=2)
    with pytest.raises(NotAudio, match="begin with RIFF but are not a WAV file"):
        decode_audio(b"RIFF but not really a wav file", "wav", "audio/wav", sample_rate=RATE, channels=1)
    with pytest.raises(NotAudio, match="do not decode"):
        decode_audio(b"not a wav file at all", "wav", "audio/wav", sample_rate=RATE, channels=1)


def test_float_wav_answers_are_quantized_like_moss_writes_its_own_files(tmp_path):
    samples = np.array([[0.5], [-0.25], [1.5]], dtype=np.float32)  # 1.5 clips
    path = tmp_path / "f.wav"
    sf.write(path, samples, RATE, subtype="FLOAT")
    decoded, _ = decode_audio(path.read_bytes(), "wav", "audio/wav", sample_rate=RATE, channels=1)
    assert decoded[:, 0].tolist() == [16384, -8192, 32767]
    from moss_cli.io.audio import to_pcm16

    outcome = Outcome("f", decoded, RATE, "", "unknown")
    assert np.array_equal(to_pcm16(outcome.waveform), decoded)  # the audit's float copy round-trips


def test_pcm_answers_through_the_cli_use_the_servers_rate_header(tmp_path):
    with serving(Behaviour(moss_headers=True)) as url:
        result = _synth(_requests(tmp_path, 1), tmp_path / "out", url, "--response-format", "pcm", "--json")
    assert result.exit_code == 0, result.output
    data, rate = sf.read(tmp_path / "out" / "r0.wav", dtype="int16")
    assert rate == RATE and data.shape[0] == 3 * 1920


def test_options_of_the_local_engine_are_refused_with_server(tmp_path):
    url, local = "http://127.0.0.1:1", ["--max-batch", "2", "--no-batch-invariant", "--stream"]
    result = _synth(_requests(tmp_path), tmp_path / "out", url, *local)
    assert result.exit_code == 2
    assert "--max-batch, --no-batch-invariant, --stream: only for the local engine" in _one_line(result.output)


def test_bad_server_options_are_refused_before_anything_is_sent():
    # User errors (MossError: exit 2, no traceback), each naming its option.
    with pytest.raises(MossError, match="--server") as refused:
        ServerOptions("ftp://example.com")
    assert refused.value.field == "--server"
    with pytest.raises(MossError, match="--response-format") as refused:
        ServerOptions("http://example.com", response_format="mp3")
    assert refused.value.field == "--response-format"


def test_every_output_masks_user_password_query_and_header_values_even_short_ones(tmp_path, monkeypatch):
    # Short secrets too: a two-letter password must not survive because it is too short to search for.
    user, password, key, header = "Uzer-Name", "Qz", "Kq-query-value", "Hx"
    secrets = (user, f":{password}@", password, key, header)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step-summary.md"))
    requests = _requests(tmp_path)
    with serving(Behaviour(moss_headers=True)) as url:
        url = url.replace("http://", f"http://{user}:{password}@") + f"/?key={key}&token={key}"
        secret_options = ("--server", url, "--header", f"X-Api-Key: {header}")
        outputs = {
            "--json": tmp_path / "a.json",
            "--junit": tmp_path / "a.xml",
            "--markdown": tmp_path / "a.md",
            "--save-golden": tmp_path / "golden.json",
            "--report-dir": tmp_path / "report",
        }
        audit = ["audit-determinism", str(requests), *secret_options, "--scenarios", "repeat"]
        saved = runner.invoke(app, [*audit, *(str(x) for pair in outputs.items() for x in pair)])
        checked = runner.invoke(app, [*audit, "--golden", str(tmp_path / "golden.json"), "--json", tmp_path / "g.json"])
        synth = _synth(requests, tmp_path / "out", url, "--header", f"X-Api-Key: {header}", "--json")
    assert saved.exit_code == checked.exit_code == synth.exit_code == 0, saved.output + checked.output + synth.output
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix not in (".wav", ".png", ".jsonl")]
    written += [tmp_path / "out" / ".moss" / "journal.jsonl"]
    expected = {"a.json", "a.xml", "a.md", "golden.json", "g.json", "index.html", "step-summary.md", "manifest.csv"}
    assert expected <= {p.name for p in written}
    assert "***" in (tmp_path / "a.json").read_text()  # the command line is recorded, masked
    for text in [saved.output, checked.output, synth.output, *(p.read_text() for p in written)]:
        for secret in secrets:
            assert secret not in text
