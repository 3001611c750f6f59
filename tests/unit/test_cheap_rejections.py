"""Rejecting an oversized request costs less than the work it asks for: a bound from byte counts
comes first, the tokenizer only sees text that could fit."""

import json

import pytest
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.config.requests import Request, RequestFileError
from moss_cli.model.prompt import PromptBuilder
from moss_cli.pipeline import Synthesizer, SynthOptions


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(SynthOptions(device="cpu"))


def test_a_text_that_cannot_fit_is_rejected_without_tokenizing(synth, monkeypatch):
    limit = synth.deploy.max_model_len
    text = "x" * (limit * synth.token_bytes + 1)  # needs more than max_model_len tokens whatever the merges

    def encode(self, text):
        raise AssertionError("tokenized a text the byte bound already rejects")

    monkeypatch.setattr(PromptBuilder, "encode", encode)
    with pytest.raises(RequestFileError, match=f"at least {limit + 1} tokens"):
        synth.prepare([Request(id="huge", text=text, line=3)])


def test_the_byte_bound_never_rejects_a_text_that_fits(synth):
    request = Request(id="fits", text="A short sentence that fits easily.", line=1)
    assert synth.min_prompt_tokens(request) <= len(synth.prompts.encode(request.text))
    assert synth.prepare([request])[0].prompt_length < synth.deploy.max_model_len


def test_a_line_longer_than_any_request_that_fits_is_rejected_unread(tmp_path, synth):
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"id": "big", "text": "word " * (synth.max_line_bytes // 4)}) + "\n")
    result = CliRunner().invoke(app, ["synth", str(path), "--dry-run", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert f"{path}:1" in result.output and "max_line_bytes" in result.output
    assert not (tmp_path / "out").exists()
