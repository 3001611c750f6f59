"""CPU proxies for the decode step a GPU can run as one graph: how often a step reads a tensor's
value on the host, and how often it copies Python numbers to the device (on CUDA either one stops
the host until the device has caught up: a blocking copy from pageable memory synchronises the
stream too, so a step that makes them cannot be captured or run ahead); and which parts of it
trace as one graph with no break."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import replace

import pytest
import torch
from sampling_rows import MIXED  # tests/ is on sys.path
from torch.utils._python_dispatch import TorchDispatchMode

from moss_cli.engine.requests import GenerationRequest
from moss_cli.engine.scheduler import Engine
from moss_cli.engine.step import Waiting
from moss_cli.numerics import FAST, INVARIANT, Layout, Numerics
from moss_cli.numerics.layout import EngineLayout
from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS

# Ops whose result the host must wait for: a value read back, or a shape that depends on values.
# (Under inference mode `item` and `is_nonzero`, bool() of a tensor, reach the mode themselves.)
READS = {
    "aten._local_scalar_dense.default",
    "aten.item.default",
    "aten.is_nonzero.default",
    "aten.equal.default",
    "aten.nonzero.default",
    "aten.masked_select.default",
}
STEPS = 6
BLOCKS_OF_4 = Numerics(layout=Layout.parse("blocks:4"))  # the six rows in two blocks, two of them idle rows


class HostSyncs(TorchDispatchMode):
    """Counts, by op, the host reads (`reads`) and the copies of Python data to a tensor (`copies`,
    `torch.tensor(...)`: on a device, a blocking host-to-device copy). `Tensor.tolist` reads without
    passing the dispatcher, so `counting` counts it apart."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in READS or _bool_index(name, args):
            self.reads[name] += 1
        elif name == "aten.lift_fresh.default":
            self.copies += 1
        return func(*args, **(kwargs or {}))


def _bool_index(name: str, args) -> bool:
    """Indexing with a bool mask: the result's shape is its count of True values (a nonzero inside)."""
    if not name.startswith(("aten.index.", "aten.index_put")):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


@contextmanager
def counting(monkeypatch):
    mode = HostSyncs()
    tolist = torch.Tensor.tolist

    def counted(tensor):
        mode.reads["Tensor.tolist"] += 1
        return tolist(tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", counted)
    with mode:
        yield mode
    monkeypatch.setattr(torch.Tensor, "tolist", tolist)


# Rows' (audio sampling, do_sample). "top-k": every row has a top-k (the sampler's short list);
# "mixed": every kind of row (`sampling_rows.MIXED`).
COMPOSITIONS = {
    "top-k": [(AUDIO_DEFAULTS, True)] * 4 + [(replace(AUDIO_DEFAULTS, top_k=9), True), (AUDIO_DEFAULTS, False)],
    "mixed": MIXED,
}


def _requests(talker, composition: str) -> list[GenerationRequest]:
    heads = COMPOSITIONS[composition]
    return [
        GenerationRequest(
            str(i),
            talker.prompt(f"host syncs, request {i}"),
            STEPS + 2,
            audio,
            STOP_HEAD_DEFAULTS,
            rng=i,
            do_sample=sample,
            ignore_stop=True,  # every row runs every step
        )
        for i, (audio, sample) in enumerate(heads)
    ]


def decode_syncs(
    talker, numerics, composition: str, monkeypatch, max_batch: int = 8, graphs: bool = False
) -> tuple[Counter, int]:
    """(host reads by op, copies) over STEPS decode steps of a batch already admitted and prefilled,
    whose composition does not change (a step makes its index tensors when it does)."""
    model = talker.model
    layout = EngineLayout.fix(model, numerics, max_batch, graphs=graphs)
    engine = Engine(model, max_batch=max_batch, layout=layout)
    waiting, running = Waiting(_requests(talker, composition)), []
    list(engine.step(waiting, running, frames=False, cancelled=None))  # admission, prefill, a first step
    assert len(running) == 6
    with counting(monkeypatch) as mode:
        for _ in range(STEPS):
            list(engine.step(waiting, running, frames=False, cancelled=None))
    assert len(running) == 6 and all(len(r.frames) == STEPS + 1 for r in running)
    return mode.reads, mode.copies


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("composition", sorted(COMPOSITIONS))
@pytest.mark.parametrize("numerics", [INVARIANT, FAST, BLOCKS_OF_4], ids=["invariant", "fast", "blocks:4"])
def test_a_decode_step_reads_at_most_one_tensor_on_the_host(talker32, numerics, composition, graphs, monkeypatch):
    reads, copies = decode_syncs(talker32, numerics, composition, monkeypatch, graphs=graphs)
    assert sum(reads.values()) <= STEPS, f"{sum(reads.values()) / STEPS:.1f} host reads a step: {dict(reads)}"
    assert copies == 0, f"{copies / STEPS:.1f} copies of Python data a step"


def test_the_counter_sees_every_kind_of_host_read(monkeypatch):
    for inference in (False, True):
        with torch.inference_mode(inference):
            t = torch.arange(5.0)
            with counting(monkeypatch) as mode:
                t[0].item(), bool(t[1] > 0), int(t[2]), t.tolist(), t[t > 1], t.nonzero(), torch.tensor([1, 2])
            assert sum(mode.reads.values()) == 6 and mode.copies == 1, mode.reads


def test_a_frame_whose_short_list_may_cut_a_tie_is_drawn_again_with_the_same_codes(talker32, monkeypatch):
    """Where a check fires the frame is drawn again asking the host, from the same uniforms: the
    codes are those of a run where no check fires."""
    from moss_cli.engine import sampling

    def run():
        engine = Engine(talker32.model, max_batch=8, layout=EngineLayout.fix(talker32.model, INVARIANT, 8))
        return {r.key: r.codes for r in engine.run(_requests(talker32, "top-k"))}

    plain = run()
    fired = []
    ties_cut = sampling._ties_cut

    def always(scores, top, kth):
        fired.append(ties_cut(scores, top, kth))
        return torch.ones((), dtype=torch.bool)

    monkeypatch.setattr(sampling, "_ties_cut", always)
    again = run()
    assert fired and not any(fired)  # the real checks never fired: these draws equal the plain run's
    assert plain.keys() == again.keys() and all(torch.equal(plain[k], again[k]) for k in plain)


def _frame_inputs(talker, rows: int = 4):
    """A frame's inputs with every kind of row: top-k and top-p, no filter, a repetition penalty, greedy."""
    from moss_cli.engine.frame import FrameSampler
    from moss_cli.engine.sampling import RowParams

    cfg = talker.model.cfg
    heads = [
        AUDIO_DEFAULTS,
        replace(AUDIO_DEFAULTS, top_k=0, top_p=0.7),
        replace(AUDIO_DEFAULTS, repetition_penalty=1.3),
    ]
    heads.append(AUDIO_DEFAULTS)
    greedy = [False, False, False, True]
    g = torch.Generator().manual_seed(0)
    draws = FrameSampler(
        torch.rand(rows, 1 + cfg.n_vq, generator=g),
        RowParams.of([STOP_HEAD_DEFAULTS] * rows, greedy, torch.device("cpu")),
        RowParams.of(heads, greedy, torch.device("cpu")),
        torch.rand(rows, cfg.n_vq, cfg.audio_vocab_size, generator=g) < 0.1,
    )
    return torch.randn(rows, cfg.hidden_size, generator=g), draws


@pytest.mark.slow
@torch.inference_mode()
def test_the_frame_is_one_graph_with_no_break(plain_talker):
    """The frame (local transformer, heads, sampler) traces as one graph (`fullgraph=True` holds),
    and that graph draws the codes the eager frame draws."""
    from moss_cli.engine.frame import frame_and_logits

    hidden, draws = _frame_inputs(plain_talker)
    explained = torch._dynamo.explain(frame_and_logits)(plain_talker.model, hidden, draws)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    graphed = torch.compile(frame_and_logits, fullgraph=True, backend="eager")(plain_talker.model, hidden, draws)
    eager = frame_and_logits(plain_talker.model, hidden, draws)
    assert torch.equal(graphed[0], eager[0]) and torch.equal(graphed[1], eager[1])


@pytest.mark.slow
@torch.inference_mode()
def test_the_backbone_decode_step_is_one_graph_with_no_break(plain_talker, monkeypatch):
    """The backbone's decode step over the KV pool, given its attention (`BlockedDecode`, built on
    the host from the rows' slots and lengths), traces as one graph."""
    from moss_cli.engine.kv_cache import BlockedDecode

    model, explained = plain_talker.model, []
    backbone = model.backbone

    def traced(x, positions, attention):
        if isinstance(attention, BlockedDecode) and not explained:
            explained.append(torch._dynamo.explain(lambda x, p: backbone(x, p, attention))(x, positions))
        return backbone(x, positions, attention)

    monkeypatch.setattr(model, "backbone", traced)
    engine = Engine(model, max_batch=2, layout=EngineLayout.fix(model, INVARIANT, 2))
    assert len(list(engine.run(_requests(plain_talker, "top-k")[:2]))) == 2
    assert (explained[0].graph_count, explained[0].graph_break_count) == (1, 0), explained[0].break_reasons
