"""The engine's block sampler equals a plain per-row loop: same filtering as the reference
(`filter_top_k_top_p`, `apply_repetition_penalty`), an inverse-CDF draw from the row's own
uniform, and a row's token never depends on the other rows of the block."""

import random

import pytest
import torch

from moss_cli.engine import sampling
from moss_cli.engine.reference import apply_repetition_penalty, filter_top_k_top_p, sample
from moss_cli.engine.sampling import RowParams, draw_uniforms, sample_rows
from moss_cli.sampling_params import HeadSampling


def _reference_row(logits, head: HeadSampling, greedy: bool, u: float, seen) -> int:
    """One row, written plainly: penalty -> temperature -> top-k -> top-p -> inverse CDF over the
    kept tokens in descending order of probability."""
    history = None if seen is None else seen.nonzero().flatten()
    scores = apply_repetition_penalty(logits.float(), history, head.repetition_penalty)
    if greedy:
        return int(torch.argmax(scores))
    filtered = filter_top_k_top_p(scores[None] / head.temperature, head.top_k, head.top_p)[0]
    ordered, order = torch.sort(filtered, descending=True, stable=True)
    probs = torch.softmax(ordered, dim=-1)
    cdf = probs.cumsum(-1)
    pick = int(torch.searchsorted(cdf, torch.tensor([u], dtype=cdf.dtype) * cdf[-1:], right=True))
    pick = min(pick, int((probs > 0).sum()) - 1)
    return int(order[pick])


def _random_case(rng: random.Random):
    rows, vocab = rng.randint(1, 9), rng.choice([2, 7, 50, 129, 1024])
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rng.randrange(2**31))) * rng.choice(
        [0.5, 3.0, 20.0]
    )
    heads = [
        HeadSampling(
            temperature=rng.choice([0.3, 1.0, 1.7]),
            top_p=rng.choice([0.05, 0.5, 0.8, 0.95, 1.0]),
            top_k=rng.choice([0, 1, 5, 25, vocab, vocab + 3]),
            repetition_penalty=rng.choice([1.0, 1.1, 1.7]),
        )
        for _ in range(rows)
    ]
    greedy = [rng.random() < 0.2 for _ in range(rows)]
    seen = torch.rand(rows, vocab, generator=torch.Generator().manual_seed(rng.randrange(2**31))) < 0.1
    return logits, heads, greedy, seen


@pytest.mark.parametrize("case", range(60))
def test_block_sampler_equals_a_per_row_loop_over_the_same_generators(case):
    rng = random.Random(case)
    logits, heads, greedy, seen = _random_case(rng)
    generators = [torch.Generator().manual_seed(rng.randrange(2**31)) for _ in heads]
    states = [g.get_state() for g in generators]
    uniforms = draw_uniforms(generators, 1, torch.device("cpu"))[:, 0]
    block = sample_rows(logits, RowParams.of(heads, greedy, logits.device), uniforms, seen)
    for g, state in zip(generators, states):  # the loop draws the same uniforms from the same streams
        g.set_state(state)
    loop = [
        _reference_row(logits[i], heads[i], greedy[i], float(torch.rand(1, generator=generators[i])), seen[i])
        for i in range(len(heads))
    ]
    assert block.tolist() == loop


@pytest.mark.parametrize("case", range(20))
def test_a_rows_token_does_not_depend_on_the_other_rows(case):
    rng = random.Random(1000 + case)
    logits, heads, greedy, seen = _random_case(rng)
    uniforms = torch.rand(len(heads), generator=torch.Generator().manual_seed(case))
    block = sample_rows(logits, RowParams.of(heads, greedy, logits.device), uniforms, seen)
    for i in range(len(heads)):
        alone = sample_rows(
            logits[i : i + 1],
            RowParams.of(heads[i : i + 1], greedy[i : i + 1], logits.device),
            uniforms[i : i + 1],
            seen[i : i + 1],
        )
        assert int(alone) == int(block[i])


def test_greedy_rows_take_the_reference_argmax():
    logits = torch.randn(5, 64, generator=torch.Generator().manual_seed(0))
    heads = [HeadSampling(temperature=1.7, top_p=0.8, top_k=25)] * 5
    chosen = sample_rows(logits, RowParams.of(heads, [True] * 5, logits.device), torch.rand(5))
    assert torch.equal(chosen, sample(logits, heads, do_sample=False))


def test_draws_follow_the_filtered_distribution():
    """Over many uniforms the tokens fall inside top-k and with the filtered probabilities."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    head = HeadSampling(temperature=1.0, top_k=3, top_p=1.0)
    uniforms = (torch.arange(10_000) + 0.5) / 10_000
    params = RowParams.of([head] * len(uniforms), [False] * len(uniforms), logits.device)
    tokens = sample_rows(logits.expand(len(uniforms), -1), params, uniforms)
    counts = torch.bincount(tokens, minlength=6).float() / len(uniforms)
    expected = torch.softmax(torch.tensor([2.0, 1.0, 0.5]), dim=-1)
    assert counts[3:].sum() == 0
    assert torch.allclose(counts[:3], expected, atol=1e-3)


@pytest.mark.parametrize("levels", [3, 40, 400])
def test_the_short_candidate_list_draws_as_a_full_sort_even_with_ties(levels, monkeypatch):
    """Quantised logits tie at the k-th score (inside the sampler's short candidate list or across
    its cut): the tokens equal those of a stable sort of the whole vocabulary."""
    rows, vocab = 8, 1024
    g = torch.Generator().manual_seed(levels)
    logits = torch.randint(0, levels, (rows, vocab), generator=g).float() / 4
    top_k = [1, 5, 25, 25, 50, 3, 25, 10]
    heads = [HeadSampling(temperature=1.0, top_p=p, top_k=k) for k, p in zip(top_k, [1.0, 0.8] * 4)]
    uniforms = torch.rand(rows, generator=g)
    params = RowParams.of(heads, [False] * rows, logits.device)
    short = sample_rows(logits, params, uniforms)
    monkeypatch.setattr(
        sampling, "_candidates", lambda scores, width, kth: torch.sort(scores, dim=-1, descending=True, stable=True)
    )
    assert short.tolist() == sample_rows(logits, params, uniforms).tolist()


@pytest.mark.parametrize("levels", [3, 40, 400])
def test_a_draw_that_asks_the_host_nothing_notes_where_the_short_list_may_cut_a_tie(levels):
    """With `checks`, the draw equals the one that asks the host wherever no check fired; where a
    tie may cross the short list's cut (coarse logits) a check fires and the caller draws again."""
    rows, vocab = 8, 1024
    g = torch.Generator().manual_seed(levels)
    logits = torch.randint(0, levels, (rows, vocab), generator=g).float() / 4
    heads = [
        HeadSampling(temperature=1.0, top_p=p, top_k=k) for k, p in zip([1, 5, 25, 25, 50, 3, 25, 10], [1.0, 0.8] * 4)
    ]
    uniforms = torch.rand(rows, generator=g)
    params = RowParams.of(heads, [False] * rows, logits.device)
    checks = []
    free = sample_rows(logits, params, uniforms, checks=checks)
    assert len(checks) == 1 and checks[0].dtype == torch.bool and checks[0].dim() == 0
    if levels == 3:
        assert bool(checks[0])  # hundreds of ties at every k-th score
    if not bool(checks[0]):
        assert free.tolist() == sample_rows(logits, params, uniforms).tolist()
    full = []
    sample_rows(
        logits, RowParams.of([HeadSampling(top_k=0)] * rows, [False] * rows, logits.device), uniforms, checks=full
    )
    assert full == []  # no short list, nothing to check


def test_row_params_read_nothing_back_from_their_device():
    """A block's parameters are read on the host before they move (a meta tensor cannot be read at all)."""
    heads = [HeadSampling(top_k=25, top_p=0.8), HeadSampling(top_k=0, top_p=1.0)]
    params = RowParams.of(heads, [False, True], torch.device("meta"))
    assert params.cut.is_meta and params.nucleus.is_meta
    assert (params.cut_range, params.any_greedy, params.all_greedy, params.any_nucleus) == ((1, 25), True, False, True)
