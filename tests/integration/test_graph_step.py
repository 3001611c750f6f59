"""`--graphs`: each decode block's whole step (frame and backbone step over the KV pool) as one
fixed-shape function that asks the host nothing (`step.whole_step`). On CUDA it is captured as a
CUDA graph; here, with no GPU, the same function runs uncaptured, and these tests check what a
capture relies on: the same codes as the eager step, one graph with no break, inputs that can be
copied into buffers of their own, and a warm-up on the scratch slot that leaves the real rows alone."""

import copy
import json
from dataclasses import replace

import pytest
import torch
from sampling_rows import MIXED  # tests/ is on sys.path
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.engine.frame import whole_step
from moss_cli.engine.kv_cache import SCRATCH
from moss_cli.engine.requests import GenerationRequest
from moss_cli.engine.scheduler import Engine
from moss_cli.numerics import FAST, INVARIANT, Layout, Numerics
from moss_cli.numerics.layout import EngineLayout, Steps
from moss_cli.numerics.tiles import KEY_BLOCK
from moss_cli.sampling_params import STOP_HEAD_DEFAULTS

runner = CliRunner()
BLOCKS_OF_4 = Numerics(layout=Layout.parse("blocks:4"))
HEADS = MIXED


def _requests(talker, ignore_stop: bool = False) -> list[GenerationRequest]:
    """Rows of every sampling kind, arriving a step apart, with budgets that end some of them and
    prompts and lengths that cross key blocks (the step's key width grows as they run)."""
    return [
        GenerationRequest(
            str(i),
            talker.prompt(f"graph request {i} " + "word " * (3 * i)),
            40 + 30 * (i % 3),
            audio,
            STOP_HEAD_DEFAULTS,
            rng=i,
            do_sample=sample,
            arrival_step=i,
            ignore_stop=ignore_stop,
        )
        for i, (audio, sample) in enumerate(HEADS)
    ]


def _codes(talker, numerics, graphs: bool, requests, max_batch: int = 4) -> dict[str, tuple]:
    layout = EngineLayout.fix(talker.model, numerics, max_batch, graphs=graphs)
    engine = Engine(talker.model, max_batch=max_batch, layout=layout)
    return {r.key: (r.codes, r.stopped) for r in engine.run(requests)}


@pytest.mark.parametrize("ignore_stop", [False, True], ids=["stops", "budgets"])
@pytest.mark.parametrize("numerics", [INVARIANT, BLOCKS_OF_4, FAST], ids=["invariant", "blocks:4", "fast"])
def test_the_whole_step_draws_the_codes_the_eager_step_draws(talker32, numerics, ignore_stop):
    requests = _requests(talker32, ignore_stop)
    eager = _codes(talker32, numerics, False, requests)
    graphed = _codes(talker32, numerics, True, requests)
    assert eager.keys() == graphed.keys() == {r.key for r in requests}
    for key, (codes, stopped) in eager.items():
        assert torch.equal(codes, graphed[key][0]) and stopped == graphed[key][1], key
    assert max(r.prompt.shape[0] + eager[r.key][0].shape[0] for r in requests) > 2 * KEY_BLOCK  # widths grew


def test_under_graphs_a_row_gets_the_same_codes_alone_and_in_any_batch(talker32):
    """Batch invariance in the graphs' layout: fixed blocks, a row's codes the same alone (B=1)
    and among others, in any order, with `--layout blocks:R` pinning the block."""
    requests = _requests(talker32)
    together = _codes(talker32, BLOCKS_OF_4, True, requests)
    reordered = _codes(talker32, BLOCKS_OF_4, True, [replace(r, arrival_step=0) for r in requests[::-1]])
    for request in requests:
        alone = _codes(talker32, BLOCKS_OF_4, True, [replace(request, arrival_step=0)], max_batch=1)
        assert torch.equal(alone[request.key][0], together[request.key][0]), request.key
        assert torch.equal(reordered[request.key][0], together[request.key][0]), request.key


def test_the_layouts_graphs_use_are_a_few_fixed_shapes(talker32):
    invariant = EngineLayout.fix(talker32.model, INVARIANT, 6, graphs=True)
    assert invariant.steps.kind is Steps.BLOCKS and invariant.steps.padded(3) == 6  # one shape
    fast = EngineLayout.fix(talker32.model, FAST, 6, graphs=True)
    assert [fast.steps.padded(b) for b in range(1, 7)] == [1, 2, 4, 4, 6, 6]  # powers of two, at most max_batch


def _first_step(talker, numerics=INVARIANT):
    """An engine's first whole step's arguments, with a copy of its pool, taken as it is called."""
    model = talker.model
    engine = Engine(model, max_batch=4, layout=EngineLayout.fix(model, numerics, 4, graphs=True))
    taken = []
    step = engine.step.runner.graphs

    def spy(model, pool, inputs, width):
        if not taken:
            taken.append((_pool_copy(pool), inputs, width))
        return step(model, pool, inputs, width)

    engine.step.runner.graphs = spy
    list(engine.run(_requests(talker)[:3]))
    return taken[0]


def _pool_copy(pool):
    copied = copy.copy(pool)
    copied.keys, copied.values, copied.filled = pool.keys.clone(), pool.values.clone(), pool.filled.clone()
    return copied


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.slow
@torch.inference_mode()
def test_the_whole_step_is_one_graph_with_no_break(plain_talker):
    """The proxy for a CUDA graph on a CPU: `torch._dynamo.explain` finds one graph and no break,
    and the step traced with `fullgraph=True` computes the eager step's bits and pool."""
    model = plain_talker.model
    pool, inputs, width = _first_step(plain_talker)
    explained = torch._dynamo.explain(whole_step)(model, _pool_copy(pool), inputs, width)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    eager_pool, traced_pool = _pool_copy(pool), _pool_copy(pool)
    eager = whole_step(model, eager_pool, inputs, width)
    traced = torch.compile(whole_step, fullgraph=True, backend="eager", dynamic=False)(
        model, traced_pool, inputs, width
    )
    assert _same(eager, traced)
    assert _same(
        (eager_pool.keys, eager_pool.values, eager_pool.filled),
        (traced_pool.keys, traced_pool.values, traced_pool.filled),
    )


@torch.inference_mode()
def test_inputs_copied_into_buffers_of_their_own_give_the_same_step(talker32):
    """What a captured graph replays: the step over its own buffers, loaded with a step's inputs."""
    pool, inputs, width = _first_step(talker32)
    buffers = inputs.cloned()
    for t in buffers.tensors():
        t.zero_()
    buffers.load(inputs)
    original_pool, buffered_pool = _pool_copy(pool), _pool_copy(pool)
    assert _same(
        whole_step(talker32.model, original_pool, inputs, width),
        whole_step(talker32.model, buffered_pool, buffers, width),
    )
    assert torch.equal(original_pool.keys, buffered_pool.keys) and torch.equal(
        original_pool.filled, buffered_pool.filled
    )


@torch.inference_mode()
def test_a_warm_up_on_the_scratch_slot_leaves_the_real_rows_alone(talker32):
    """A capture first runs the step with every row on the scratch slot: no real row's keys,
    values or length change."""
    pool, inputs, width = _first_step(talker32)
    warm = inputs.cloned()
    warm.slots.fill_(SCRATCH)
    before = _pool_copy(pool)
    whole_step(talker32.model, pool, warm, width)
    real = [s for s in range(1, pool.keys.shape[1])]
    assert torch.equal(pool.keys[:, real], before.keys[:, real]) and torch.equal(
        pool.values[:, real], before.values[:, real]
    )
    assert torch.equal(pool.filled, before.filled)


def test_synth_and_the_bitwise_audit_run_under_graphs(tmp_path):
    out = tmp_path / "audit.json"
    args = ["audit-determinism", "--graphs", "--level", "bitwise", "--scenarios", "shuffled,staggered"]
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["environment"]["graphs"] is True and report["summary"]["passed"]
    assert report["environment"]["engine_steps"].startswith("blocks of")


def test_the_bench_records_graphs_and_reports_no_build_time_where_nothing_is_captured(tmp_path):
    """On a CPU `--graphs` captures nothing: no compile time is reported (on CUDA the capture's is)."""
    out = tmp_path / "bench.json"
    args = ["bench", "--random-weights", "tiny", "--batch", "2", "--frames", "4", "--repeats", "1", "--graphs"]
    result = runner.invoke(app, [*args, "--modes", "invariant,fast", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["setup"]["graphs"] is True and report["setup"]["compile"] is False
    assert [(r["mode"], r["compile_s"]) for r in report["results"]] == [("invariant", None), ("fast", None)]
    layouts = {r["mode"]: r["layout"] for r in report["results"]}
    assert layouts == {"invariant": "blocks of 2", "fast": "one block of a power of two rows, at most 2"}


def test_engines_under_graphs_hand_their_kv_pool_on_so_graphs_replay_over_the_same_buffers(talker32):
    """A run makes an engine of its own; under --graphs the next one gets the last one's pool back
    (every slot free), so the graphs captured over its buffers replay, and its codes are unchanged.
    A pool in use is never lent, and eager engines keep pools of their own."""
    layout = EngineLayout.fix(talker32.model, INVARIANT, 4, graphs=True)
    requests = _requests(talker32)[:3]
    first = Engine(talker32.model, max_batch=4, layout=layout)
    busy = Engine(talker32.model, max_batch=4, layout=layout)  # made while the first holds its pool
    assert busy.pool is not first.pool
    before = {r.key: r.codes for r in first.run(requests)}
    buffers = (first.pool.keys.data_ptr(), first.pool.values.data_ptr(), first.pool.filled.data_ptr())
    second = Engine(talker32.model, max_batch=4, layout=layout)
    assert second.pool is first.pool and not any(second.pool.lengths) and not second.pool.filled.any()
    after = {r.key: r.codes for r in second.run(requests)}
    assert (second.pool.keys.data_ptr(), second.pool.values.data_ptr(), second.pool.filled.data_ptr()) == buffers
    assert all(torch.equal(before[k], after[k]) for k in before)
    abandoned = Engine(talker32.model, max_batch=4, layout=layout).run(requests)
    next(abandoned)  # a run given up halfway (a client gone) gives its pool back too, every slot free
    abandoned.close()
    again = Engine(talker32.model, max_batch=4, layout=layout)
    assert again.pool is first.pool and sorted(again.pool.free) == list(range(1, len(again.pool.lengths)))
    eager = EngineLayout.fix(talker32.model, INVARIANT, 4)
    assert Engine(talker32.model, max_batch=4, layout=eager).pool is not Engine(talker32.model, layout=eager).pool
    slots, positions = first.pool.keys.shape[1], first.pool.keys.shape[3]
    assert slots & (slots - 1) == 0 and (positions // KEY_BLOCK) & (positions // KEY_BLOCK - 1) == 0  # powers of two


def _counting_backend(compiled: list):
    """A torch.compile backend that notes each graph dynamo hands it and runs it as traced."""

    def backend(graph_module, example_inputs):
        compiled.append(graph_module)
        return graph_module.forward

    return backend


@pytest.mark.slow
def test_a_400_frame_generation_under_graphs_builds_a_bounded_number_of_shapes(plain_talker):
    """`--graphs --compile` over a 400-frame generation whose batch shrinks (blocks of 4, 2, 1 rows)
    while its keys grow (three key widths) and a repetition penalty leaves: every shape
    is compiled once (no recompile past the shapes: dynamo's limit is never reached, which would
    raise), within `shapes_bound`, and the codes are the eager step's."""
    from moss_cli.engine.compiled import StepGraphs, shapes_bound

    model = plain_talker.model
    budgets = [(400, 1.0), (60, 1.3), (150, 1.0), (250, 1.0)]  # (frames, repetition penalty)
    requests = [
        GenerationRequest(
            str(i),
            plain_talker.prompt(f"a long request {i}"),
            frames,
            replace(HEADS[0][0], repetition_penalty=penalty),
            STOP_HEAD_DEFAULTS,
            rng=i,
            ignore_stop=True,
        )
        for i, (frames, penalty) in enumerate(budgets)
    ]
    compiled: list = []
    layout = EngineLayout.fix(model, FAST, 4, graphs=True)
    engine = Engine(model, max_batch=4, layout=layout)
    graphs = StepGraphs(whole_step, compile=True, device_type="cpu", backend=_counting_backend(compiled))
    engine.step.runner.graphs = graphs
    graphed = {r.key: r.codes for r in engine.run(requests)}
    eager = _codes(plain_talker, FAST, False, requests)
    assert all(torch.equal(graphed[key], eager[key][0]) for key in eager)
    assert max(c.shape[0] for c in graphed.values()) == 400
    shapes = [shape for shape, _ in graphs.shapes]
    sizes = {shape[0][0] for shape in shapes}
    widths = {shape[3] // KEY_BLOCK for shape in shapes}
    pools = {shape[2][3] // KEY_BLOCK for shape in shapes}
    assert sizes == {4, 2, 1} and len(pools) == 1 and len(widths) >= 3  # the keys grew across three widths
    assert all(w & (w - 1) == 0 for w in widths | pools)  # powers of two key blocks
    assert {shape[4] for shape in shapes} == {True, False}  # with and without the penalty
    assert len(compiled) == len(graphs.shapes) <= shapes_bound(len(sizes), max(pools))


def test_the_step_graphs_keep_dynamos_recompile_limit_above_the_shapes_they_build():
    """More shapes than dynamo's default limit (8): each is compiled, none falls back to eager."""
    from types import SimpleNamespace

    from moss_cli.engine.compiled import StepGraphs

    compiled: list = []

    def step(model, pool, inputs, width):
        return (inputs.hidden[:, :width].sum(1) + pool.keys.sum(),)

    graphs = StepGraphs(step, compile=True, device_type="cpu", backend=_counting_backend(compiled))
    pool = SimpleNamespace(keys=torch.ones(1, 1, 1, 4, 1))
    inputs = SimpleNamespace(hidden=torch.ones(2, 16), sampler=SimpleNamespace(seen=None))
    widths = range(1, 13)
    assert torch._dynamo.config.recompile_limit < len(widths)
    for width in widths:
        assert graphs(None, pool, inputs, width)[0].tolist() == [width + 4.0] * 2
    assert len(compiled) == len(widths) == len(graphs.shapes)
