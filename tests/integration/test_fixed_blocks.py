"""Fixed decode blocks: where one padded block is not verified (or `--layout blocks` forces them),
every step runs blocks of exactly --max-batch rows, so a full batch reads each weight once; a row's
bits then depend on neither its neighbours nor its place in the block. `blocks:R` pins R."""

from types import SimpleNamespace

import pytest
import torch

from moss_cli.engine.requests import GenerationRequest
from moss_cli.engine.scheduler import Engine
from moss_cli.numerics import MAX_BLOCK_ROWS, Layout, Numerics, kernels, probes
from moss_cli.numerics.layout import EngineLayout, Steps
from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS


def _requests(talker, count):
    return [
        GenerationRequest(
            str(i),
            talker.prompt(f"fixed block request {i} " * (1 + i % 3)),
            6 + i,
            AUDIO_DEFAULTS,
            STOP_HEAD_DEFAULTS,
            rng=i,
        )
        for i in range(count)
    ]


def _run(talker, layout, requests, max_batch):
    """Codes and every logit row by (request, frame, codebook), and the block sizes the steps ran."""
    logits, sizes = {}, []

    def hook(key, frame, codebook, row_logits, batch, generator):
        logits[(key, frame, codebook)] = row_logits.clone()

    engine = Engine(talker.model, max_batch=max_batch, layout=layout, logits_hook=hook)
    plan = engine.step.plan

    def planned(running):
        step = plan(running)
        sizes.extend(block.size for block in step.blocks)
        return step

    engine.step.plan = planned
    codes = {r.key: r.codes for r in engine.run(requests)}
    return codes, logits, set(sizes)


def test_forced_fixed_blocks_give_every_request_the_bits_it_gets_alone(talker32):
    layout = EngineLayout.fix(talker32.model, Numerics(layout=Layout.parse("blocks")), 6)
    rows = 6 if probes.fixed_blocks_are_invariant(talker32.model, 6) else 8  # 8 where this CPU's 6-row products are not
    assert str(layout.steps) == f"blocks of {rows}" and layout.steps.kind is Steps.BLOCKS
    requests = _requests(talker32, 9)
    together, together_logits, sizes = _run(talker32, layout, requests, 6)
    assert sizes == {rows}  # 9 requests: two blocks, the second padded
    for request in requests:
        alone, alone_logits, alone_sizes = _run(talker32, layout, [request], 1)
        assert alone_sizes == {rows}  # alone, the row still computes in a whole block
        assert torch.equal(alone[request.key], together[request.key])
        mine = {k: v for k, v in together_logits.items() if k[0] == request.key}
        assert mine.keys() == alone_logits.keys()
        assert all(torch.equal(v, alone_logits[k]) for k, v in mine.items())


def test_pinned_blocks_give_the_same_bits_at_every_max_batch(talker32):
    requests = _requests(talker32, 5)
    small = EngineLayout.fix(talker32.model, Numerics(layout=Layout.parse("blocks:4")), 2)
    large = EngineLayout.fix(talker32.model, Numerics(layout=Layout.parse("blocks:4")), 16)
    assert small.steps == large.steps and str(small.steps) == "blocks of 4"
    a, _, _ = _run(talker32, small, requests, 2)
    b, _, _ = _run(talker32, large, requests, 16)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_where_a_product_rounds_by_row_count_the_fallback_is_one_block_of_max_batch_rows(talker32, monkeypatch):
    def rounding_by_row_count(x, weight, bias=None):  # as a GEMM library that picks kernels by M
        return kernels.linear(x, weight, bias) + x.shape[0] * 1e-6

    monkeypatch.setattr(probes, "_VERDICTS", {})
    monkeypatch.setattr(probes, "kernels", SimpleNamespace(linear=rounding_by_row_count, pack=kernels.pack))
    assert str(EngineLayout.fix(talker32.model, Numerics(), 32).steps) == "blocks of 32"
    assert str(EngineLayout.fix(talker32.model, Numerics(), 1000).steps) == f"blocks of {MAX_BLOCK_ROWS}"
    assert str(EngineLayout.fix(talker32.model, Numerics(), 32, compile=True).steps) == "blocks of 32"  # one graph


def test_a_product_whose_rows_depend_on_their_place_keeps_the_reference_blocks(talker32, monkeypatch):
    def rounding_by_place(x, weight, bias=None):  # a row's bits follow its index in the block
        out = kernels.linear(x, weight, bias)
        return out + torch.arange(out.shape[0], dtype=out.dtype).reshape(-1, *[1] * (out.dim() - 1)) * 1e-6

    monkeypatch.setattr(probes, "_VERDICTS", {})
    monkeypatch.setattr(probes, "kernels", SimpleNamespace(linear=rounding_by_place, pack=kernels.pack))
    assert not probes.fixed_blocks_are_invariant(talker32.model, 32)
    assert str(EngineLayout.fix(talker32.model, Numerics(layout=Layout.parse("blocks")), 32).steps) == "blocks of 8"
    monkeypatch.undo()
    assert probes.fixed_blocks_are_invariant(talker32.model, 32)


def test_a_layout_is_parsed_once_and_spelled_back_as_given():
    assert Numerics().layout == Layout() and str(Layout()) == "auto"
    assert Layout.parse("blocks:12") == Layout(fixed=True, rows=12) and str(Layout(fixed=True, rows=12)) == "blocks:12"
    assert Layout.parse("blocks") == Layout(fixed=True) and str(Layout(fixed=True)) == "blocks"


@pytest.mark.parametrize("bad", ["wide", "blocks:0", "blocks:x", f"blocks:{MAX_BLOCK_ROWS + 1}", "blocks:"])
def test_an_unknown_layout_is_refused(bad):
    with pytest.raises(ValueError, match="expected auto, blocks or blocks:R"):
        Layout.parse(bad)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--layout", "wide"], "expected auto, blocks or blocks:R"),
        (["--layout", "blocks", "--no-batch-invariant"], "means nothing with --no-batch-invariant"),
        (["--layout", "blocks", "--server", "http://127.0.0.1:9"], "only for the local engine"),
    ],
)
def test_a_bad_layout_option_is_exit_2_naming_it(tmp_path, args, message):
    from typer.testing import CliRunner

    from moss_cli.cli.app import app

    requests = tmp_path / "r.jsonl"
    requests.write_text('{"id": "a", "text": "hello"}\n')
    result = CliRunner().invoke(app, ["synth", str(requests), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert "--layout" in result.output and message in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_a_compiled_fixed_block_replays_as_a_cuda_graph_on_cuda_only():
    from moss_cli.engine.compiled import uses_cuda_graphs

    assert uses_cuda_graphs(True, "cuda")  # one shape: captured once, replayed every frame
    assert not uses_cuda_graphs(False, "cuda")  # the fast mode's shapes follow the batch
    assert not uses_cuda_graphs(True, "cpu")
