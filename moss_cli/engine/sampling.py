"""The engine's sampler: repetition penalty -> temperature -> top-k -> top-p -> draw, each a named
step of `sample_rows` (the shape of vLLM's `Sampler.forward`), for a whole block of rows at once.

The order and the float32 cast follow the reference talker (`reference.sample`). Where the random
numbers come from is explicit: `random_stream` makes a request's own generator (or leaves it on the
global RNG), and `draw_uniforms` draws every uniform a row needs for a frame before the frame.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..numerics.kernels import as_dtype
from ..sampling_params import HeadSampling


def random_stream(rng: int | torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """The one place a request's random stream is made: its own generator seeded with `rng` (the
    request's effective seed), the generator given (the Python API's), or None: the global RNG,
    shared by everything in the batch (an unseeded request, or every request of the legacy mode)."""
    if rng is None or isinstance(rng, torch.Generator):
        return rng
    return torch.Generator(device=device).manual_seed(rng)


# --- The engine's sampler: a whole block of rows at once, each row from its own random stream. ---
#
# `reference.sample` mirrors the reference (torch.multinomial per call). The engine instead draws, at
# the start of every frame, all the uniforms a row needs (one per head) from that row's own
# generator, and turns each head's filtered distribution into a token by inverse CDF. Filtering
# and the draw then run on the block's fixed [rows, V] shape with per-row parameters, and a row's
# token depends only on its logits and its own uniforms.


@dataclass(frozen=True)
class RowParams:
    """Per-row sampling parameters of one head as [rows] tensors, plus what every draw of a frame
    derives from them (built once per frame, used by each of its draws)."""

    temperature: torch.Tensor  # float32
    top_k: torch.Tensor  # int64; 0 (or >= V) disables it
    top_p: torch.Tensor  # float32; 1 disables it
    repetition_penalty: torch.Tensor  # float32; 1 disables it
    greedy: torch.Tensor  # bool: argmax instead of a draw
    # False: no Python facts are read (a captured graph's parameters change between replays), so
    # every draw takes the general path, as a compiled graph does.
    facts: bool = True
    # Derived. A greedy row's draw is discarded, so its filter is top-k 1 whatever its own top_k.
    cut: torch.Tensor = field(init=False)  # int64 [rows]: top-k per row, 1 for greedy rows
    kth: torch.Tensor = field(init=False)  # int64 [rows, 1]: where the k-th score is, cut - 1
    divisor: torch.Tensor = field(init=False)  # [rows, 1]: temperature, 1 where it is not positive
    penalty: torch.Tensor = field(init=False)  # [rows, 1]: repetition penalty
    penalised: torch.Tensor = field(init=False)  # bool [rows, 1]: repetition penalty != 1
    nucleus: torch.Tensor = field(init=False)  # bool [rows, 1]: 0 < top_p < 1
    mass: torch.Tensor = field(init=False)  # [rows, 1]: top_p
    # Python facts about the rows, so that a draw skips work no row needs without asking the tensors.
    cut_range: tuple[int, int] = field(init=False)  # (min, max) of `cut`
    all_greedy: bool = field(init=False)
    any_greedy: bool = field(init=False)
    any_nucleus: bool = field(init=False)
    all_nucleus: bool = field(init=False)

    def __post_init__(self) -> None:
        def derive(name, value):
            object.__setattr__(self, name, value)

        derive("cut", torch.where(self.greedy, 1, self.top_k))
        derive("kth", (self.cut - 1)[:, None])
        derive("divisor", torch.where(self.temperature > 0, self.temperature, 1.0)[:, None])
        derive("penalty", self.repetition_penalty[:, None])
        derive("penalised", (self.repetition_penalty != 1.0)[:, None])
        derive("nucleus", ((self.top_p > 0) & (self.top_p < 1))[:, None])
        derive("mass", self.top_p[:, None])
        if self.general:
            return  # the general path needs none of the Python facts
        cut = self.cut.tolist()
        derive("cut_range", (min(cut), max(cut)) if cut else (0, 0))
        greedy = self.greedy.tolist()
        derive("all_greedy", all(greedy))
        derive("any_greedy", any(greedy))
        nucleus = self.nucleus.flatten().tolist()
        derive("any_nucleus", any(nucleus))
        derive("all_nucleus", all(nucleus))

    BASE = ("temperature", "top_k", "top_p", "repetition_penalty", "greedy")  # what the rest derives from

    @property
    def general(self) -> bool:
        """Every draw runs every step for every row: no Python facts (none read, or a graph being
        compiled, which has none)."""
        return not self.facts or torch.compiler.is_compiling()

    def without_facts(self) -> RowParams:
        """The same parameters, derived again on the device, with no Python facts."""
        return RowParams(*(getattr(self, name) for name in self.BASE), facts=False)

    @classmethod
    def of(cls, heads: Sequence[HeadSampling], greedy: Sequence[bool], device: torch.device) -> RowParams:
        """Built on the host, where its Python facts are read without waiting on `device`, then moved there."""

        def column(values, dtype):
            return torch.tensor(values, dtype=dtype)

        on_host = cls(
            column([h.temperature for h in heads], torch.float32),
            column([h.top_k for h in heads], torch.long),
            column([h.top_p for h in heads], torch.float32),
            column([h.repetition_penalty for h in heads], torch.float32),
            column(list(greedy), torch.bool),
        )
        moved = copy.copy(on_host)
        for name, value in vars(on_host).items():
            if isinstance(value, torch.Tensor):
                object.__setattr__(moved, name, value.to(device))
        return moved

    def short_list(self, vocab: int) -> int | None:
        """How many of the highest scores can hold every row's top-k (a little room for ties at
        the k-th score), or None when some row has no top-k below `vocab` (then all are sorted)."""
        if self.general:  # a graph sorts everything (and has no Python facts)
            return None
        low, high = self.cut_range
        return None if low <= 0 or high >= vocab else min(vocab, high + 8)

    def may_cut(self, vocab: int) -> bool:
        """Whether some row's top-k may keep fewer than `vocab` tokens (False: top-k keeps everything)."""
        if self.general:
            return True
        low, high = self.cut_range
        return not (high <= 0 or low >= vocab)


def sample_rows(
    logits: torch.Tensor,
    params: RowParams,
    uniforms: torch.Tensor,
    seen: torch.Tensor | None = None,
    checks: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """One token per row of logits [B, V], the recipe step by step: repetition penalty (tokens
    marked in `seen` [B, V]) -> temperature -> top-k -> top-p -> inverse-CDF draw with `uniforms`
    [B] (or [B, 1]) in [0, 1). Greedy rows take the argmax of the penalised scores, as the reference
    does. Every step is one op on the whole block; what only depends on the parameters was computed
    once for the frame (RowParams). A graph (compiled, or `RowParams` without Python facts) has no
    data-dependent branches: it runs every step for every row.

    With `checks` (a list), the draw reads nothing on the host: where the short candidate list
    (`_candidates`) might have cut ties at a row's k-th score, it appends a True (a 0-dim bool
    tensor) instead of asking, and the caller draws again without `checks` (the uniforms are
    drawn before, so the draw is the same but for the cut)."""
    general = params.general
    scores = repetition_penalty(as_dtype(logits, torch.float32), params, seen)
    greedy = None
    if general or params.any_greedy:
        greedy = torch.argmax(scores, dim=-1)
        if not general and params.all_greedy:
            return greedy
    ordered, order = top_k(temperature(scores, params), params, checks)
    top_p(ordered, params)
    drawn = draw(ordered, order, uniforms)
    return drawn if greedy is None else torch.where(params.greedy, greedy, drawn)


def repetition_penalty(scores: torch.Tensor, params: RowParams, seen: torch.Tensor | None) -> torch.Tensor:
    """Scores of tokens a row produced before (`seen`) divided by its penalty (multiplied when negative)."""
    if seen is None:
        return scores
    penalty = params.penalty
    penalised = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(seen & params.penalised, penalised, scores)


def temperature(scores: torch.Tensor, params: RowParams) -> torch.Tensor:
    return scores / params.divisor


def top_k(
    scores: torch.Tensor, params: RowParams, checks: list[torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, token ids) in descending order with everything below a row's k-th largest score at
    -inf (ties kept, as torch.topk + `<` does in `reference.sample`); only the columns that can
    hold a kept token where every row has a top-k (`RowParams.short_list`). `checks`: see `sample_rows`."""
    vocab = scores.shape[-1]
    width = params.short_list(vocab)
    if checks is None or width is None:
        ordered, order = _candidates(scores, width, params.kth)
    else:
        ordered, order, cut_ties = _short_candidates(scores, width, params.kth)
        checks.append(cut_ties)
    if width is not None:  # every row has a top-k within the short list
        ordered = ordered.masked_fill(ordered < ordered.gather(-1, params.kth), -torch.inf)
    elif params.may_cut(vocab):
        cut = params.cut.clamp(min=0)
        limited = ((cut > 0) & (cut < vocab))[:, None]
        kth = ordered.gather(-1, (cut.clamp(1, ordered.shape[-1]) - 1)[:, None])
        kth = torch.where(limited, kth, -torch.inf)
        ordered = ordered.masked_fill(ordered < kth, -torch.inf)
    return ordered, order


def top_p(ordered: torch.Tensor, params: RowParams) -> None:
    """Over what top-k kept (`ordered`, descending, this recipe's own tensor, so masked in place):
    -inf for the tokens after the one that crosses a row's top_p; the first token always stays."""
    general = params.general
    if general or params.any_nucleus:
        cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
        crossed = cumulative[:, :-1] > params.mass
        if general or not params.all_nucleus:
            crossed = crossed & params.nucleus
        ordered[:, 1:].masked_fill_(crossed, -torch.inf)


def draw(ordered: torch.Tensor, order: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The token at each row's uniform in the cumulative distribution of what is kept (inverse CDF)."""
    probs = torch.softmax(ordered, dim=-1)
    cdf = probs.cumsum(dim=-1)
    target = as_dtype(uniforms if uniforms.dim() == 2 else uniforms[:, None], cdf.dtype) * cdf[:, -1:]
    pick = torch.searchsorted(cdf, target, right=True)  # [B, 1]
    last = (probs > 0).sum(dim=-1, keepdim=True) - 1  # sorted descending: the kept tokens come first
    return order.gather(-1, torch.minimum(pick, last)).squeeze(-1)


def _candidates(scores: torch.Tensor, width: int | None, kth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, token ids) in descending order, ties by token id, as a stable sort gives them; only
    the first `width` columns when every sampling row has a top-k (its k-th score at `kth`) and no tie crosses the cut
    (a full sort of [rows, V] was the sampler's largest cost on a CPU). Whatever is cut is below every
    row's k-th score, so top-k would drop it anyway. A compiled graph always sorts everything (no
    data-dependent shapes)."""
    if width is None:
        return torch.sort(scores, dim=-1, descending=True, stable=True)
    top = torch.topk(scores, width, dim=-1)  # descending; the order of ties is unspecified
    if bool((top.values[:, 1:] < top.values[:, :-1]).all()):
        # Strictly decreasing (no tie, no NaN): that is the stable order, and every row's k-th score
        # (at most width - 9) lies above everything cut.
        return top.values, top.indices
    if bool(_ties_cut(scores, top, kth)):
        return torch.sort(scores, dim=-1, descending=True, stable=True)  # a tie may continue past the cut
    return _stable(scores, top.indices)


def _short_candidates(
    scores: torch.Tensor, width: int, kth: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_candidates` with a short list and no question to the host: (scores, token ids, whether a
    tie at some row's k-th score may continue past the cut, a 0-dim bool tensor). Where it may not,
    these are `_candidates`' bits: with no tie the stable order of the short list is topk's own."""
    top = torch.topk(scores, width, dim=-1)
    ordered, order = _stable(scores, top.indices)
    return ordered, order, _ties_cut(scores, top, kth)


def _ties_cut(scores: torch.Tensor, top, kth: torch.Tensor) -> torch.Tensor:
    """0-dim bool: the short list's last score still ties some row's k-th (more of the tie may lie past the cut)."""
    if top.values.shape[-1] >= scores.shape[-1]:
        return torch.zeros((), dtype=torch.bool, device=scores.device)
    return (top.values[:, -1:] >= top.values.gather(-1, kth)).any()


def _stable(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores at `ids` and their ids, in descending order, ties by token id (a stable sort)."""
    ids = ids.sort(dim=-1).values  # the kept ids in id order, then a stable sort by score
    ordered, position = torch.sort(scores.gather(-1, ids), dim=-1, descending=True, stable=True)
    return ordered, ids.gather(-1, position)


def draw_uniforms(generators: Sequence[torch.Generator | None], heads: int, device: torch.device) -> torch.Tensor:
    """[rows, heads] uniforms for one frame, drawn row by row, each from its row's generator (None:
    the global RNG, shared, so its draws depend on the rows before it)."""
    return torch.stack([torch.rand(heads, generator=g, device=device) for g in generators])
