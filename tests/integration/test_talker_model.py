"""The talker's structure: embeddings, the local loop order, and the heads."""

import torch
import torch.nn.functional as F

from moss_cli.engine.frame import STOP_HEAD, choose_codes, choose_stop, start_frame


def test_pad_code_contributes_zero_to_the_input_embedding(talker64):
    model, cfg = talker64.model, talker64.config
    text_only = torch.full((1, 1, cfg.n_vq + 1), cfg.audio_pad_code)
    text_only[0, 0, 0] = 65
    torch.testing.assert_close(model.embed(text_only)[0, 0], model.transformer.embed_tokens.weight[65])

    row = text_only.clone()
    row[0, 0, 1], row[0, 0, 3] = 5, 7  # codebooks 0 and 2 set, the rest pad
    expected = (
        model.transformer.embed_tokens.weight[65]
        + model.audio_embeddings[0].weight[5]
        + model.audio_embeddings[2].weight[7]
    )
    torch.testing.assert_close(model.embed(row)[0, 0], expected)


def test_audio_heads_are_tied_to_audio_embeddings_and_stop_head_is_binary(talker64):
    model = talker64.model
    h = torch.randn(3, talker64.config.hidden_size, dtype=torch.float64)
    torch.testing.assert_close(model.audio_logits(2, h), h @ model.audio_embeddings[2].weight.T)
    assert model.stop_logits(h).shape == (3, 2)
    torch.testing.assert_close(model.stop_logits(h), h @ model.local_text_lm_head.weight.T)


def test_local_loop_feeds_position_k_output_to_head_k_and_code_k_to_position_k_plus_1(talker64):
    model, n_vq = talker64.model, talker64.config.n_vq
    hidden = torch.randn(2, talker64.config.hidden_size, dtype=torch.float64)
    seen: dict[int, torch.Tensor] = {}

    def choose(codebook, logits):
        seen[codebook] = logits
        return logits.argmax(-1)

    local_hidden, past = start_frame(model, hidden)
    stop = choose_stop(model, local_hidden, choose)
    codes = choose_codes(model, local_hidden, past, choose)
    assert stop.shape == (2,) and codes.shape == (2, n_vq)

    # Recompute the whole frame in one uncached local pass over [hidden, emb_0(c_0), ..., emb_{n-2}(c_{n-2})].
    inputs = [hidden.unsqueeze(1)] + [model.audio_embeddings[k](codes[:, k]).unsqueeze(1) for k in range(n_vq - 1)]
    out, _ = model.local(torch.cat(inputs, dim=1), 0)
    torch.testing.assert_close(seen[STOP_HEAD], F.linear(out[:, 0], model.local_text_lm_head.weight))
    for k in range(n_vq):
        torch.testing.assert_close(seen[k], F.linear(out[:, k], model.audio_embeddings[k].weight))


def test_backbone_with_padded_cache_matches_a_full_uncached_pass(talker64):
    from moss_cli.engine.reference import PaddedBatchCache

    model = talker64.model
    rows = talker64.prompt("Cache me if you can.").unsqueeze(0)
    t = rows.shape[1]
    full = model.backbone(model.embed(rows), torch.arange(t)[None])
    cache = PaddedBatchCache()
    cache.key_mask = torch.ones(1, t - 1, dtype=torch.bool)
    model.backbone(model.embed(rows[:, :-1]), torch.arange(t - 1)[None], cache)
    cache.key_mask = torch.ones(1, t, dtype=torch.bool)
    last = model.backbone(model.embed(rows[:, -1:]), torch.tensor([[t - 1]]), cache)
    torch.testing.assert_close(last[:, 0], full[:, -1])


def test_the_local_rope_table_built_during_inference_serves_a_forward_that_tracks_gradients(talker64):
    model = talker64.model
    x = torch.randn(2, 3, talker64.config.hidden_size, dtype=torch.float64)
    model.local_transformer._rope_tables.clear()
    with torch.inference_mode():
        expected, _ = model.local(x, 1)
    out, _ = model.local(x.requires_grad_(), 1)
    out.sum().backward()
    assert x.grad is not None and torch.equal(out.detach(), expected)
