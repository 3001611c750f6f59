"""Why two compositions diverge for a request.

Both compositions are re-run up to the request's first diverging frame while its logits, and the
state of the random stream it draws from, are recorded at every draw. At the diverging draw:
- a different random-stream state (the request drew from a stream other requests also consume)
  is `rng-coupling`; with bitwise-equal logits nothing else can explain the different token;
- the same stream state but different logits is `numeric`: the batch changed the numbers; we
  report the head, the frame and the largest logit difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine.frame import STOP_HEAD
from ..engine.requests import LogitsHook
from ..measures.waveform import format_abs, format_db
from .compare import STOP, Comparison


@dataclass
class Attribution:
    cause: str  # "rng-coupling" | "numeric" | "codec-numeric" | "unseeded" | "drift"
    detail: str
    frame: int | None = None
    head: str | None = None
    max_logit_diff: float | None = None
    # The largest logits of the request at the diverging draw in each composition (reference: alone),
    # as [token, logit] pairs, largest first: what a person compares to see why another token won.
    top_logits: dict[str, list[list]] | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def codec_numeric(cmp: Comparison) -> Attribution:
    """Identical codes, different PCM: the codec's numbers changed with the batch."""
    return Attribution(
        "codec-numeric",
        f"identical codes but different PCM (max abs diff "
        f"{format_abs(cmp.measures['max_abs_diff'])}, SNR {format_db(cmp.snr_db)} dB)",
    )


TOP_LOGITS = 8


def top_logits(logits: torch.Tensor, k: int = TOP_LOGITS) -> list[list]:
    values, tokens = logits.double().topk(min(k, logits.shape[-1]))
    return [[int(t), float(v)] for t, v in zip(tokens.tolist(), values.tolist())]


class _Enough(Exception):
    """Raised from the logits hook once the frames we need are recorded."""


def head_name(codebook: int) -> str:
    return "stop" if codebook == STOP_HEAD else f"audio[{codebook}]"


def _stream_state(generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    if generator is not None:
        return generator.get_state()
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def record_logits(run_fn, key: str, last_frame: int, perturb: LogitsHook | None) -> dict[tuple[int, int], tuple]:
    """Run a composition (run_fn(hook) must drive the engine) and keep `key`'s (logits, stream state)
    at every draw up to `last_frame`."""
    seen: dict[tuple[int, int], tuple] = {}

    def hook(k, frame, codebook, logits, batch, generator):
        replaced = perturb(k, frame, codebook, logits, batch, generator) if perturb is not None else None
        if k == key:
            if frame > last_frame:
                raise _Enough
            used = replaced if replaced is not None else logits
            seen[(frame, codebook)] = (used.detach().clone(), _stream_state(generator, logits.device))
        return replaced

    try:
        run_fn(hook)
    except _Enough:
        pass
    return seen


def attribute(
    run_reference,
    run_other,
    key: str,
    frame: int,
    codebook: int | str,
    n_vq: int,
    perturb: LogitsHook | None = None,
    record=record_logits,
) -> Attribution:
    """Re-run both compositions (callables taking a logits hook, or whatever `record` replays: Ray
    workers replay theirs) and classify the first divergence."""
    ref = record(run_reference, key, frame, perturb)
    oth = record(run_other, key, frame, perturb)
    draw = (frame, STOP_HEAD if codebook == STOP else int(codebook))
    head = head_name(draw[1])
    if draw not in ref or draw not in oth:
        return Attribution("unknown", f"could not replay the draw at frame {frame}, head {head}", frame, head)
    (logits_a, state_a), (logits_b, state_b) = ref[draw], oth[draw]
    diff = float((logits_a.double() - logits_b.double()).abs().max())
    first = _first_numeric_difference(ref, oth, draw)
    tops = {"reference": top_logits(logits_a), "other": top_logits(logits_b)}
    if not torch.equal(state_a, state_b):
        also = "" if diff == 0 else f" (its logits also differ by up to {diff:.3g}: {first})"
        return Attribution(
            "rng-coupling",
            f"frame {frame}, head {head}: the request drew from a random stream whose state depends on the batch{also}",
            frame,
            head,
            diff,
            tops,
        )
    if diff > 0:
        return Attribution(
            "numeric",
            f"frame {frame}, head {head}: same random stream, logits differ by up to {diff:.3g} ({first})",
            frame,
            head,
            diff,
            tops,
        )
    return Attribution(
        "nondeterministic",
        f"frame {frame}, head {head}: same logits and random stream, yet a "
        "different token (a nondeterministic sampling kernel?)",
        frame,
        head,
        0.0,
        tops,
    )


def _first_numeric_difference(ref: dict, oth: dict, until: tuple[int, int]) -> str:
    """Where the logits first stopped being bitwise equal, up to the diverging draw."""
    for draw in sorted(k for k in ref if k in oth and k <= until):
        a, b = ref[draw][0], oth[draw][0]
        if not torch.equal(a, b):
            return f"logits first differ at frame {draw[0]}, head {head_name(draw[1])}"
    return "no earlier logit difference"
