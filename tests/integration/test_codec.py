"""The audio codec: dequantisation, decoder stages, channel layout, v1 and v2 checkpoints."""

import json

import pytest
import torch
from safetensors.torch import save_file

import moss_cli
from moss_cli.assets import TINY_CODEC
from moss_cli.model.codec import (
    AudioCodec,
    CodecAttention,
    PatchStage,
    Quantizer,
    WeightNormConv1x1,
)
from moss_cli.model.config import CodecConfig, CodecStage, QuantizerConfig
from moss_cli.numerics import INVARIANT


def test_decode_returns_batch_channels_and_downsample_rate_samples_per_frame(codec):
    codes = torch.randint(0, 128, (6, 2, 5))
    audio = codec.decode(codes)
    assert audio.shape == (2, codec.channels, 5 * codec.cfg.downsample_rate)
    assert audio.dtype == torch.float32 and torch.isfinite(audio).all()
    assert codec.sample_rate == 48000 and codec.channels == 2 and codec.frame_rate == 12.5


def test_decoding_a_prefix_of_quantizers_works_and_more_than_the_codec_has_fails(codec):
    codes = torch.randint(0, 128, (codec.num_quantizers, 1, 4))
    shapes = {codec.decode(codes[:nq]).shape for nq in (1, 3, codec.num_quantizers)}
    assert shapes == {(1, 2, 4 * 3840)}
    assert not torch.equal(codec.decode(codes[:1]), codec.decode(codes[:2]))
    with pytest.raises(ValueError, match="quantizers"):
        codec.decode(torch.zeros(codec.num_quantizers + 1, 1, 4, dtype=torch.long))


def test_rlfq_decode_is_the_sum_of_the_codebook_vectors_when_projections_are_identity():
    q = Quantizer(
        QuantizerConfig("rlfq", input_dim=2, rvq_dim=2, output_dim=2, num_quantizers=2, codebook_size=3, codebook_dim=2)
    )
    with torch.no_grad():
        q.quantizers[0].codebook.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]))
        q.quantizers[1].codebook.weight.copy_(torch.tensor([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]]))
    codes = torch.tensor([[[2, 0]], [[1, 2]]])  # [nq=2, B=1, T=2]
    out = q.decode(codes)
    assert out.tolist() == [[[2.0 + 0.0, 1.0 + 5.0], [2.0 + 10.0, 0.0 + 5.0]]]
    assert q.decode(codes[:1]).tolist() == [[[2.0, 1.0], [2.0, 0.0]]]


def test_weight_normed_projection_is_gain_times_unit_direction_plus_bias():
    conv = WeightNormConv1x1(2, 1)
    with torch.no_grad():
        conv.parametrizations.weight.original1.copy_(torch.tensor([[[3.0], [4.0]]]))  # |v| = 5
        conv.parametrizations.weight.original0.copy_(torch.tensor([[[10.0]]]))
        conv.bias.copy_(torch.tensor([1.0]))
    x = torch.tensor([[[1.0], [1.0]]])  # [B, in, T]
    assert conv(x).item() == pytest.approx(10 * (3 + 4) / 5 + 1)


def test_patch_decode_interleaves_the_channel_groups_in_time_and_encode_inverts_it():
    x = torch.tensor([[[0.0, 1.0], [10.0, 11.0], [20.0, 21.0], [30.0, 31.0]]])  # [B, D*h=4, T=2], h=2
    up = PatchStage(2, downsample=False)(x)
    assert up.tolist() == [[[0.0, 10.0, 1.0, 11.0], [20.0, 30.0, 21.0, 31.0]]]
    torch.testing.assert_close(PatchStage(2, downsample=True)(up), x)


def _attention(context):
    stage = CodecStage(
        kind="transformer",
        input_dimension=8,
        output_dimension=8,
        d_model=8,
        num_heads=2,
        num_layers=1,
        dim_feedforward=16,
        causal=True,
    )
    torch.manual_seed(0)
    return CodecAttention(stage, context).double()


def test_sliding_window_attention_sees_exactly_the_last_context_positions():
    attn = _attention(context=3)
    x = torch.randn(1, 10, 8, dtype=torch.float64)
    base = attn(x)
    for changed in range(10):
        y = x.clone()
        y[0, changed] += 1.0
        moved = (attn(y) - base).abs().amax(-1)[0] > 1e-12
        assert moved.nonzero().flatten().tolist() == [t for t in range(10) if 0 <= t - changed < 3]


def test_blocked_attention_equals_one_full_masked_attention(monkeypatch):
    import moss_cli.model.codec as codec_module

    attn = _attention(context=5)
    x = torch.randn(2, 23, 8, dtype=torch.float64)
    monkeypatch.setattr(codec_module, "ATTENTION_BLOCK", 4)
    blocked = attn(x)
    monkeypatch.setattr(codec_module, "ATTENTION_BLOCK", 1000)
    torch.testing.assert_close(blocked, attn(x))


def test_interleaved_decoder_stream_splits_into_even_left_and_odd_right_samples(codec):
    captured = {}
    hook = codec.decoder[-1].register_forward_hook(lambda m, i, o: captured.setdefault("out", o))
    try:
        audio = codec.decode(torch.randint(0, 128, (6, 1, 3)))
    finally:
        hook.remove()
    stream = captured["out"]
    assert stream.shape == (1, 1, 2 * 3 * 3840)
    torch.testing.assert_close(audio[:, 0], stream[:, 0, 0::2])
    torch.testing.assert_close(audio[:, 1], stream[:, 0, 1::2])


def _v1_config() -> dict:
    def transformer(inp, out):
        return {
            "module_type": "Transformer",
            "input_dimension": inp,
            "output_dimension": out,
            "d_model": 16,
            "num_heads": 2,
            "num_layers": 1,
            "dim_feedforward": 32,
            "causal": True,
            "norm": "layer_norm",
            "positional_embedding": "rope",
            "max_period": 10000,
            "gating": "none",
            "layer_scale": 0.01,
            "conv_layout": True,
        }

    patch = {"module_type": "PatchedPretransform", "patch_size": 2}
    return {
        "architectures": ["MossAudioTokenizerModel"],
        "auto_map": {"AutoModel": "x.y"},
        "model_type": "speech_tokenizer",
        "sampling_rate": 2400,
        "sample_rate": 2400,
        "downsample_rate": 192,
        "causal_transformer_context_duration": 1,
        "code_dim": 16,
        "quantizer_type": "rlfq",
        "quantizer_kwargs": {
            "codebook_dim": 4,
            "codebook_size": 32,
            "input_dim": 16,
            "num_quantizers": 4,
            "output_dim": 16,
            "quantizer_type": "rlfq",
            "rvq_dim": 8,
        },
        "encoder_kwargs": [
            {"module_type": "PatchedPretransform", "patch_size": 24},
            transformer(24, 8),
            patch,
            transformer(16, 8),
            patch,
            transformer(16, 8),
            patch,
            transformer(16, 16),
        ],
        "decoder_kwargs": [
            transformer(16, 16),
            patch,
            transformer(8, 16),
            patch,
            transformer(8, 16),
            patch,
            transformer(8, 24),
            {"module_type": "PatchedPretransform", "patch_size": 24},
        ],
        "transformers_version": "4.56.0.dev0",
        "version": "4.26.1.a",
        "dtype": "float32",
    }


def _to_v1_key(name: str) -> str:
    return (
        name.replace(".self_attn.in_proj.", ".self_attn.in_projs.0.")
        .replace(".self_attn.out_proj.", ".self_attn.out_projs.0.")
        .replace(".ffn.0.", ".linear1.")
        .replace(".ffn.2.", ".linear2.")
    )


def test_a_v1_layout_checkpoint_loads_and_decodes_mono_at_its_own_rate(tmp_path):
    cfg_dict = _v1_config()
    cfg = CodecConfig.from_dict(cfg_dict)
    assert cfg.channels == 1 and not cfg.interleave
    torch.manual_seed(1)
    original = AudioCodec(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg_dict))
    save_file(
        {_to_v1_key(k): v.contiguous() for k, v in original.state_dict().items()}, str(tmp_path / "model.safetensors")
    )
    loaded = moss_cli.load_codec(tmp_path, device="cpu", dtype="float32")
    # v1: one window duration for all stages, int(frame_rate * duration) frames at each stage's rate.
    contexts = [s.transformer.layers[0].self_attn.context for s in loaded.decoder if hasattr(s, "transformer")]
    assert contexts == [12, 25, 50, 100]
    codes = torch.randint(0, 32, (3, 2, 7))
    audio = loaded.decode(codes)
    assert audio.shape == (2, 1, 7 * 192) and loaded.sample_rate == 2400
    torch.testing.assert_close(audio, original.decode(codes))


def test_v2_stage_context_comes_from_each_stage_duration(codec):
    contexts = [s.transformer.layers[0].self_attn.context for s in codec.decoder if hasattr(s, "transformer")]
    # decoder stage rates 12.5, 25, 50, 100, 200, 400 Hz with durations 10, 10, 8, 4, 2, 1 s
    assert contexts == [125, 250, 400, 400, 400, 400]


def test_codec_float64_decode_matches_float32_closely(codec):
    from moss_cli.assets import TINY_CODEC

    codec64 = moss_cli.load_codec(TINY_CODEC, device="cpu", dtype="float64")
    codes = torch.randint(0, 128, (6, 1, 6))
    torch.testing.assert_close(codec64.decode(codes), codec.decode(codes), atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("frames", [1, 63, 64, 65, 126, 260])
def test_fixed_tile_decode_computes_the_same_function_as_the_plain_decode(codec, frames):
    """The invariant path (fixed GEMM tiles, query tiles aligned to absolute positions) must only
    change rounding: lengths cross the 64-row tiles and stage 0's 125-frame attention window, and
    the upsampled stages cross theirs (a wrong window or tile offset would differ by far more)."""
    tiled = moss_cli.load_codec(TINY_CODEC, device="cpu", dtype="float32", numerics=INVARIANT)
    torch.manual_seed(frames)
    codes = torch.randint(0, 128, (6, 2, frames))
    plain, fixed = codec.decode(codes), tiled.decode(codes)
    assert plain.shape == fixed.shape
    assert (plain - fixed).abs().max().item() <= 1e-5
