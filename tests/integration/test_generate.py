"""Generation through the Python API (`Talker.generate`)."""

import pytest
import torch


@pytest.mark.parametrize("reference_loop", [False, True])
def test_greedy_left_padded_batch_returns_each_row_exactly_as_alone(talker64, reference_loop):
    prompts = [
        talker64.prompt(t)
        for t in ("Hi.", "A much longer sentence than the others, to force padding.", "Middle length text here.")
    ]
    batched = talker64.generate(
        *talker64.batch(prompts), max_new_frames=12, do_sample=False, reference_loop=reference_loop
    )
    for prompt, codes in zip(prompts, batched):
        alone = talker64.generate(
            *talker64.batch([prompt]), max_new_frames=12, do_sample=False, reference_loop=reference_loop
        )[0]
        assert codes.shape == (12, talker64.config.n_vq) and codes.dtype == torch.long
        assert torch.equal(codes, alone)


def test_generate_returns_codes_in_the_audio_vocab_and_stops_rows_independently(talker32):
    prompts = [talker32.prompt("one"), talker32.prompt("two")]
    gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
    out = talker32.generate(*talker32.batch(prompts), max_new_frames=300, generators=gens)
    assert len(out) == 2
    for codes in out:
        assert codes.dim() == 2 and codes.shape[1] == talker32.config.n_vq
        assert codes.numel() == 0 or (codes.min() >= 0 and codes.max() < talker32.config.audio_vocab_size)
    assert out[0].shape[0] != out[1].shape[0]  # these seeds stop at different frames


def test_per_row_generators_make_a_row_independent_of_its_neighbours(talker32):
    prompt = talker32.prompt("Seeded request.")
    other = talker32.prompt("Some neighbour with another seed.")
    alone = talker32.generate(
        *talker32.batch([prompt]), max_new_frames=20, generators=[torch.Generator().manual_seed(42)]
    )[0]
    batched = talker32.generate(
        *talker32.batch([other, prompt]),
        max_new_frames=20,
        generators=[torch.Generator().manual_seed(7), torch.Generator().manual_seed(42)],
    )[1]
    assert torch.equal(alone, batched)


@pytest.mark.parametrize("reference_loop", [False, True])
def test_one_shared_generator_reproduces_the_same_batch(talker32, reference_loop):
    ids, mask = talker32.batch([talker32.prompt("a"), talker32.prompt("b")])
    first = talker32.generate(
        ids, mask, max_new_frames=15, generator=torch.Generator().manual_seed(3), reference_loop=reference_loop
    )
    second = talker32.generate(
        ids, mask, max_new_frames=15, generator=torch.Generator().manual_seed(3), reference_loop=reference_loop
    )
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_reference_mode_draws_one_batched_sample_from_the_shared_stream(talker32):
    # reference_loop=True is the reference's padded loop: one multinomial call per head for the whole batch.
    ids, mask = talker32.batch([talker32.prompt("a"), talker32.prompt("b")])
    torch.manual_seed(11)
    first = talker32.generate(ids, mask, max_new_frames=6, reference_loop=True)
    torch.manual_seed(11)
    again = talker32.generate(ids, mask, max_new_frames=6, reference_loop=True)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_max_new_frames_caps_the_output(talker32):
    out = talker32.generate(*talker32.batch([talker32.prompt("cap")]), max_new_frames=3, do_sample=False)[0]
    assert out.shape == (3, talker32.config.n_vq)


def test_generate_works_in_bfloat16(tmp_path):
    import moss_cli
    from moss_cli.assets import TINY_TALKER

    talker = moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="bfloat16")
    assert talker.model.transformer.embed_tokens.weight.dtype == torch.bfloat16
    out = talker.generate(*talker.batch([talker.prompt("bf16")]), max_new_frames=4, do_sample=False)[0]
    assert out.shape == (4, talker.config.n_vq)


def _reference_prompt(talker, record):
    fields = {k: record[k] for k in ("language", "instruction") if k in record}
    if "reference_codes" in record:
        fields["references"] = [torch.tensor(record["reference_codes"])]
    if "continuation_codes" in record:
        fields["continuation"] = torch.tensor(record["continuation_codes"])
    return talker.prompt(record["text"], **fields)


@pytest.mark.parametrize("reference_loop", [False, True])
def test_greedy_codes_match_those_the_reference_implementation_produced(talker64, reference_loop):
    # tests/data/reference_greedy_tiny.json was recorded by running the public reference processor
    # and MossTTSLocalModel.generate (sdpa, float64, greedy) on the shipped tiny checkpoint: plain
    # text, an instruction, a reference voice and a continuation (its "note" says how).
    import json
    from pathlib import Path

    recorded = json.loads((Path(__file__).resolve().parents[1] / "data" / "reference_greedy_tiny.json").read_text())
    records = recorded["records"]
    prompts = [_reference_prompt(talker64, r) for r in records]
    for prompt, r in zip(prompts, records):
        assert prompt.tolist() == r["prompt"], f"prompt for {r['text']!r} differs from the reference processor's"
    out = talker64.generate(
        *talker64.batch(prompts),
        max_new_frames=recorded["max_new_frames"],
        do_sample=False,
        reference_loop=reference_loop,
    )
    for codes, r in zip(out, records):
        assert codes.tolist() == r["codes"], f"codes for {r['text']!r} differ from the reference's"


def test_repetition_penalty_in_the_engine_matches_the_reference_loop(talker64):
    """Greedy with a repetition penalty: the engine's per-row `seen` marks give the codes the
    reference loop gets from each channel's history."""
    ids, mask = talker64.batch([talker64.prompt("Hello."), talker64.prompt("A longer second request here.")])
    kwargs = dict(max_new_frames=12, do_sample=False, repetition_penalty=1.3)
    engine = talker64.generate(ids, mask, **kwargs)
    reference = talker64.generate(ids, mask, reference_loop=True, **kwargs)
    plain = talker64.generate(ids, mask, max_new_frames=12, do_sample=False)
    assert all(torch.equal(a, b) for a, b in zip(engine, reference))
    assert any(not torch.equal(a, b) for a, b in zip(engine, plain))  # the penalty did change something
