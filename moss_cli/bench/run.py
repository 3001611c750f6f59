"""`moss bench`: how fast the engine and the codec run here, per numerics mode and batch size.

For each mode (batch-invariant with the layout it chooses here; batch-invariant with fixed blocks
forced, `blocks` or `blocks:R`; fast), arm (bench/arms.py: every row seeded, none, or all with the
deploy seed) and batch size it runs the talker for a fixed number of
frames (the stop head runs but never ends a request), decodes the codes with the codec, streams one
request to time its first audio, and measures the floor: the same weight-shaped matrix products
with nothing between them (no attention, no sampling, no Python loop). Efficiency is floor time /
engine step time: how close the engine is to what the hardware allows for these weights, where
products are long next to their launches (a CPU). On an accelerator they are not, and the physical
bound counts: the bytes a step must read over the bandwidth a large copy reaches on the device,
measured once after every run (floor.step_bytes, floor.copy_bandwidth); `efficiency_bandwidth` is
that bound / engine step time.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, NamedTuple

import torch

from ..config.deploy import load_deploy
from ..device import resolve_device, resolve_dtype
from ..engine.compiled import builds, compile_seconds
from ..engine.kv_cache import KVPool
from ..engine.prefill import prefill
from ..engine.requests import FrameEvent, GenerationRequest
from ..engine.scheduler import Engine
from ..errors import MossError
from ..model.codec import AudioCodec
from ..model.prompt import PromptBuilder
from ..numerics import FAST, INVARIANT, Layout, Numerics
from ..numerics.layout import EngineLayout
from ..pipeline.streaming import StreamingDecode
from ..sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS
from ..threads import apply_threads
from .arms import arm_seed, check_deploy_seed
from .floor import copy_bandwidth, floor_step, kv_bytes, kv_read_step, step_bytes, sync
from .models import PROMPT, load_models
from .options import BenchOptions


@dataclass
class BenchRow:
    mode: str
    arm: str  # how each row's random stream was seeded (bench/arms.py)
    batch: int
    layout: str  # how the mode's decode steps were laid out at this batch (numerics.layout)
    frames: int
    decode_step_ms: float
    decode_step_ms_range: list[float]  # [min, max] over the repeats
    talker_frames_per_s: float
    prefill_tokens_per_s: float
    codec_rtf: float  # codec seconds per audio second
    audio_s_per_s: float  # audio seconds per wall second, talker + codec
    ttfa_s: float  # streaming: admission to the first audio chunk, first request of the batch
    floor_step_ms: float
    efficiency: float  # floor / engine step: the median of each run paired with the floors measured after it
    efficiency_range: list[float]  # [min, max] of those pairs
    kv_read_ms: float  # one read of every backbone layer's keys and values at the run's mean cache length
    efficiency_bound: float  # floor / (floor + KV read): what an engine with no other cost would reach
    step_read_mb: float  # 10^6 bytes a step must read: its weights as often as it reads them, its KV cache once
    kv_read_mb: float  # of which the KV cache, at the run's mean length
    peak_memory_mb: float
    compile_s: float | None = None  # --compile or --graphs: seconds this row's first run spent compiling or capturing
    # The physical bound, set once the copy bandwidth is measured (after every run, so that its buffers
    # stay out of the rows' peak memory): step_read_mb over the bandwidth, and that over the engine step.
    bandwidth_step_ms: float | None = None
    efficiency_bandwidth: float | None = None


@dataclass
class BenchReport:
    setup: dict
    rows: list[BenchRow] = field(default_factory=list)
    # per batch-invariant mode and batch size: its decode step time over the fast mode's (in the
    # first arm), the median (and [min, max]) of the repeats' pairs (the modes alternate within each repeat)
    ratios: dict[str, dict[str, float]] = field(default_factory=dict)
    ratio_ranges: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # per arm other than unseeded, mode and batch size: its decode step time over the unseeded arm's
    arm_ratios: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    arm_ratio_ranges: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "setup": self.setup,
            "results": [asdict(r) for r in self.rows],
            "over_fast": self.ratios,
            "over_fast_range": self.ratio_ranges,
            "over_unseeded": self.arm_ratios,
            "over_unseeded_range": self.arm_ratio_ranges,
        }


def mode_numerics(mode: str) -> Numerics:
    """invariant (the layout this machine allows), blocks / blocks:R (fixed blocks forced), fast."""
    if mode in ("invariant", "fast"):
        return INVARIANT if mode == "invariant" else FAST
    try:
        return Numerics(layout=Layout.parse(mode))
    except ValueError:
        raise MossError(
            f"unknown mode {mode!r}; expected invariant, blocks, blocks:R (fixed blocks of R rows) or fast",
            field="--modes",
        ) from None


def _requests(prompts: PromptBuilder, batch: int, frames: int, arm: str = "seeded", deploy_seed: int | None = None):
    prompt = prompts.build(PROMPT)
    return [
        GenerationRequest(
            key=str(i),
            prompt=prompt,
            max_new_frames=frames,
            audio=AUDIO_DEFAULTS,
            stop=STOP_HEAD_DEFAULTS,
            rng=arm_seed(arm, None, i, deploy_seed),  # None: the global RNG, shared by the batch
            ignore_stop=True,
        )
        for i in range(batch)
    ]


class TalkerRun(NamedTuple):
    step_s: float  # one decode step
    prefill_s: float
    prompt_tokens: int
    floor_s: float = 0.0  # the floor measured right after the run (_timed_runs)
    kv_s: float = 0.0  # and the least reading of its KV cache (kv_read_step)


def _talker_run(
    model, layout: EngineLayout, prompts, batch: int, frames: int, arm: str = "seeded", deploy_seed: int | None = None
) -> TalkerRun:
    """Decode step seconds, prefill seconds and prompt tokens of one run of `batch` requests."""
    requests = _requests(prompts, batch, frames, arm, deploy_seed)
    prefill_s = _prefill_seconds(model, layout, requests)
    engine = Engine(model, max_batch=batch, layout=layout)
    marks = []
    for event in engine.events(requests):
        if isinstance(event, FrameEvent) and event.key == "0":
            marks.append(time.perf_counter())
    step = (marks[-1] - marks[0]) / max(len(marks) - 1, 1)
    return TalkerRun(step, prefill_s, sum(int(r.prompt.shape[0]) for r in requests))


@torch.inference_mode()
def _prefill_seconds(
    model, layout: EngineLayout, requests: list[GenerationRequest], clock: Callable[[], float] = time.perf_counter
) -> float:
    """Seconds of the prefill alone of `requests` admitted together, as the engine runs it (the same
    function, grouped by the layout), timed on its own: the accelerator's queue drained before the
    first reading and after the prefill, so the time covers its work and nothing else."""
    param = next(model.parameters())
    backbone = model.cfg.backbone
    pool = KVPool(backbone.num_layers, backbone.num_kv_heads, backbone.head_dim, param.device, param.dtype)
    slots = [pool.allocate(r.prompt.shape[0] + r.max_new_frames) for r in requests]
    prompts = [r.prompt.to(param.device) for r in requests]
    sync(param.device)
    start = clock()
    prefill(model, pool, prompts, slots, layout.prefill)
    sync(param.device)
    return clock() - start


def _timed_runs(
    model, prompts, batch: int, options: BenchOptions, layouts: dict[str, EngineLayout], deploy_seed: int | None
) -> tuple[dict[tuple[str, str], list], dict[str, float]]:
    """Per mode (run in `layouts[mode]`) and arm, `options.repeats` talker runs with their floors, and the seconds
    each mode's first (untimed) run spent compiling. The modes and arms alternate within each repeat and
    each run is followed by its floor: a shared machine's speed drifts, and figures taken at the same
    moment drift together, so their ratios hold still."""
    compile_times = {}
    for mode in options.modes:
        before = compile_seconds()
        if options.graphs:  # a run as long as the timed ones: every key width is captured here
            _talker_run(model, layouts[mode], prompts, batch, options.frames)
        elif options.compile:  # compiling happens here, not inside the timed runs
            _talker_run(model, layouts[mode], prompts, batch, 2)
        compile_times[mode] = compile_seconds() - before
    rows = {mode: layout.steps.padded(batch) for mode, layout in layouts.items()}  # what a step really computes
    variants = [(mode, arm) for mode in options.modes for arm in options.arms]
    timed: dict[tuple[str, str], list] = {variant: [] for variant in variants}
    for _ in range(options.repeats):
        for mode, arm in variants:
            run = _talker_run(model, layouts[mode], prompts, batch, options.frames, arm, deploy_seed)
            floor = statistics.median(floor_step(model, rows[mode]) for _ in range(3))
            length = run.prompt_tokens // batch + options.frames // 2  # the cache's mean length over the run
            kv = kv_read_step(model, rows[mode], length)
            timed[(mode, arm)].append(run._replace(floor_s=floor, kv_s=kv))
    return timed, compile_times


def _ttfa(model, codec: AudioCodec, layout: EngineLayout, prompts, batch: int, frames: int, arm, deploy_seed) -> float:
    """Seconds from the start of a streamed batch to the first request's first audio chunk."""
    engine = Engine(model, max_batch=batch, layout=layout)
    start = time.perf_counter()
    first = StreamingDecode(codec, [1, 15])
    for event in engine.events(_requests(prompts, batch, min(frames, 16), arm, deploy_seed)):
        if isinstance(event, FrameEvent) and event.key == "0":
            first.push(event.codes)
            if first.chunks:
                return first.chunks[0].at_s - start
    return float("nan")


def _codec_seconds(codec: AudioCodec, n_vq: int, batch: int, frames: int, device) -> float:
    codes = torch.randint(0, codec.cfg.quantizer.codebook_size, (n_vq, batch, frames), device=device)
    sync(device)
    start = time.perf_counter()
    codec.decode(codes)
    sync(device)
    return time.perf_counter() - start


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _pairs(steps: list[float], baseline: list[float]) -> tuple[float, float, float]:
    """[min, median, max] of each repeat's step time over the baseline's of the same repeat."""
    pairs = [a / b for a, b in zip(steps, baseline)]
    return round(min(pairs), 4), round(statistics.median(pairs), 4), round(max(pairs), 4)


def run_bench(options: BenchOptions, progress=None) -> BenchReport:
    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    for mode in options.modes:
        mode_numerics(mode)  # an unknown mode is an error before anything runs
    deploy_seed = None
    if options.deploy is not None:
        deploy_seed = load_deploy(options.deploy, device.type, allow_foreign=options.allow_foreign_deploy).default_seed
    check_deploy_seed(options.arms, deploy_seed, options.deploy is not None)
    model, codec_for, prompts, what = load_models(options, device, dtype)
    apply_threads(options.threads, model.cfg)
    report = BenchReport(_setup(options, model, what, device, dtype, deploy_seed))
    codecs = {mode: codec_for(mode_numerics(mode)) for mode in options.modes}
    with torch.inference_mode():
        _talker_run(model, EngineLayout.fix(model, mode_numerics(options.modes[0]), 1), prompts, 1, 2)  # warm-up
    built = builds(options.compile, options.graphs, device.type)  # a compile time to report
    for batch in options.batches:
        # Each mode's layout, fixed once per batch: its runs, its floor's row count and its row.
        layouts = {
            m: EngineLayout.fix(model, mode_numerics(m), batch, options.compile, options.graphs) for m in options.modes
        }
        with torch.inference_mode():
            timed, compile_times = _timed_runs(model, prompts, batch, options, layouts, deploy_seed)
        steps = {variant: [run.step_s for run in runs] for variant, runs in timed.items()}
        _add_ratios(report, options, batch, steps)
        for (mode, arm), runs in timed.items():
            with torch.inference_mode():
                codec_s = statistics.median(
                    _codec_seconds(codecs[mode], model.cfg.n_vq, batch, options.frames, device)
                    for _ in range(options.repeats)
                )
                ttfa = _ttfa(model, codecs[mode], layouts[mode], prompts, batch, options.frames, arm, deploy_seed)
            peak = _peak_memory_mb(device)
            measured = Measured(mode, arm, batch, runs, steps[(mode, arm)], codec_s, ttfa, compile_times[mode], peak)
            report.rows.append(_row(model, options, layouts[mode], measured, codecs[mode].cfg.frame_rate, built))
            if progress:
                progress(report.rows[-1])
    _add_bandwidth(report, device)
    return report


def _setup(options: BenchOptions, model, what: str, device: torch.device, dtype, deploy_seed: int | None) -> dict:
    """What the figures were measured with (the report's setup)."""
    return {
        "model": what,
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "frames": options.frames,
        "arms": list(options.arms),
        "deploy_seed": deploy_seed,
        "repeats": options.repeats,
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "compile": options.compile,
        "graphs": options.graphs,
        "linear_kernel": "onednn-packed" if model.packed else "plain",
    }


def _add_ratios(report: BenchReport, options: BenchOptions, batch: int, steps: dict) -> None:
    """Each batch-invariant mode's step time over the fast mode's (first arm), and each arm's over
    the unseeded arm's (every mode), at `batch`: the median and range of the repeats' pairs."""
    first = options.arms[0]
    for mode in [m for m in options.modes if m != "fast"] if "fast" in options.modes else ():
        low, median, high = _pairs(steps[(mode, first)], steps[("fast", first)])
        report.ratios.setdefault(mode, {})[str(batch)] = median
        report.ratio_ranges.setdefault(mode, {})[str(batch)] = [low, high]
    for arm in [a for a in options.arms if a != "unseeded"] if "unseeded" in options.arms else ():
        for mode in options.modes:
            low, median, high = _pairs(steps[(mode, arm)], steps[(mode, "unseeded")])
            report.arm_ratios.setdefault(arm, {}).setdefault(mode, {})[str(batch)] = median
            report.arm_ratio_ranges.setdefault(arm, {}).setdefault(mode, {})[str(batch)] = [low, high]


class Measured(NamedTuple):
    """One variant's figures at one batch size, as `run_bench` took them."""

    mode: str
    arm: str
    batch: int
    runs: list  # `_timed_runs`' talker runs with their floors
    steps: list[float]  # each run's decode step seconds
    codec_s: float
    ttfa_s: float
    compile_s: float
    peak_memory_mb: float


def _row(model, options: BenchOptions, layout: EngineLayout, m: Measured, frame_rate: float, built: bool) -> BenchRow:
    """The report's row of one variant from its measurements."""
    step = statistics.median(m.steps)
    prefill = statistics.median(run.prefill_s for run in m.runs)
    tokens = m.runs[0].prompt_tokens
    efficiencies = [run.floor_s / run.step_s for run in m.runs]
    bounds = [run.floor_s / (run.floor_s + run.kv_s) for run in m.runs]
    length = tokens // m.batch + options.frames // 2  # as the KV read's (_timed_runs)
    audio_s = m.batch * options.frames / frame_rate
    talker_s = prefill + step * options.frames
    return BenchRow(
        mode=m.mode,
        arm=m.arm,
        batch=m.batch,
        layout=str(layout.steps),
        frames=options.frames,
        decode_step_ms=round(step * 1e3, 3),
        decode_step_ms_range=[round(min(m.steps) * 1e3, 3), round(max(m.steps) * 1e3, 3)],
        talker_frames_per_s=round(m.batch / step, 2),
        prefill_tokens_per_s=round(tokens / prefill, 1),
        codec_rtf=round(m.codec_s / audio_s, 4),
        audio_s_per_s=round(audio_s / (talker_s + m.codec_s), 3),
        ttfa_s=round(m.ttfa_s, 4),
        floor_step_ms=round(statistics.median(run.floor_s for run in m.runs) * 1e3, 3),
        efficiency=round(statistics.median(efficiencies), 3),
        efficiency_range=[round(min(efficiencies), 3), round(max(efficiencies), 3)],
        kv_read_ms=round(statistics.median(run.kv_s for run in m.runs) * 1e3, 3),
        efficiency_bound=round(statistics.median(bounds), 3),
        step_read_mb=round(step_bytes(model, m.batch, length) / 1e6, 3),
        kv_read_mb=round(kv_bytes(model, m.batch, length) / 1e6, 3),
        peak_memory_mb=round(m.peak_memory_mb, 1),
        compile_s=round(m.compile_s, 2) if built else None,
    )


def _add_bandwidth(report: BenchReport, device: torch.device) -> None:
    """The physical bound of every row, from the copy bandwidth measured once after every run (so
    that its buffers stay out of the rows' peak memory)."""
    bandwidth = copy_bandwidth(device)
    report.setup["bandwidth_gb_per_s"] = round(bandwidth / 1e9, 2)
    for row in report.rows:
        bound_ms = row.step_read_mb * 1e6 / bandwidth * 1e3
        row.bandwidth_step_ms = round(bound_ms, 4)
        row.efficiency_bandwidth = round(bound_ms / row.decode_step_ms, 4)
