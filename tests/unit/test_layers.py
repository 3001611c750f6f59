"""Hand-checkable tests of the shared building blocks."""

import math

import pytest
import torch
import torch.nn.functional as F

from moss_cli.model.attention import causal_mask
from moss_cli.model.layers import (
    RMSNorm,
    apply_interleaved,
    apply_rotate_half,
    codec_rope,
    interleaved_angles,
    rotate_half_angles,
)


def test_rotate_half_rope_pairs_dimension_i_with_i_plus_half():
    # head_dim 4: pairs (x0, x2) and (x1, x3); position 1, base 1 -> both frequencies are 1 rad.
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]]])  # [B, T, heads, D]
    cos, sin = rotate_half_angles(torch.tensor([[1]]), 4, base=1.0, dtype=torch.float32)
    out = apply_rotate_half(x, cos[:, :, None], sin[:, :, None])
    c, s = math.cos(1.0), math.sin(1.0)
    expected = torch.tensor([1 * c - 3 * s, 2 * c - 4 * s, 3 * c + 1 * s, 4 * c + 2 * s])
    torch.testing.assert_close(out[0, 0, 0], expected)


def test_interleaved_rope_pairs_adjacent_dimensions():
    # head_dim 4: pairs (x0, x1) and (x2, x3).
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]]])
    cos, sin = interleaved_angles(torch.tensor([[1]]), 4, base=1.0, dtype=torch.float32)
    out = apply_interleaved(x, cos, sin)
    c, s = math.cos(1.0), math.sin(1.0)
    expected = torch.tensor([1 * c - 2 * s, 2 * c + 1 * s, 3 * c - 4 * s, 4 * c + 3 * s])
    torch.testing.assert_close(out[0, 0, 0], expected)


def test_rope_frequencies_fall_with_dimension():
    # base 100, head_dim 4: inverse frequencies 1 and 1/10; at position 10 the angles are 10 and 1 rad.
    cos, _ = rotate_half_angles(torch.tensor([[10]]), 4, base=100.0, dtype=torch.float64)
    torch.testing.assert_close(
        cos[0, 0],
        torch.tensor([math.cos(10), math.cos(1), math.cos(10), math.cos(1)], dtype=torch.float64),
        rtol=1e-6,
        atol=1e-6,
    )


def test_rope_at_position_zero_is_identity():
    x = torch.randn(1, 1, 2, 8)
    for angles, apply in ((rotate_half_angles, apply_rotate_half), (interleaved_angles, apply_interleaved)):
        cos, sin = angles(torch.tensor([[0]]), 8, 10000.0, torch.float32)
        torch.testing.assert_close(apply(x, cos[:, :, None], sin[:, :, None]), x)


def test_codec_rope_rotates_adjacent_pairs_by_position_times_frequency():
    q = torch.tensor([1.0, 0.0, 0.0, 1.0]).view(1, 1, 1, 4)  # [B, heads, T, D]
    q2, k2 = codec_rope(q, q.clone(), offset=3, max_period=10000.0)
    # frequencies exp(-log(10000) * 2 * i / 4) = 1, 0.01 for i = 0, 1; angles 3 and 0.03 rad.
    a, b = 3.0, 0.03
    expected = torch.tensor([math.cos(a), math.sin(a), -math.sin(b), math.cos(b)])
    torch.testing.assert_close(q2.view(4), expected)
    torch.testing.assert_close(k2, q2)


def test_qk_norm_normalises_each_head_separately():
    norm = RMSNorm(2, eps=0.0)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0]))
    heads = torch.tensor([[3.0, 4.0], [0.5, 0.5]])  # two heads of dim 2
    out = norm(heads)
    rms0, rms1 = math.sqrt((9 + 16) / 2), 0.5
    torch.testing.assert_close(out, torch.tensor([[3 / rms0, 2 * 4 / rms0], [0.5 / rms1, 2 * 0.5 / rms1]]))


def test_rms_norm_computes_statistics_in_float32_for_half_inputs():
    x = torch.tensor([[300.0, 400.0]], dtype=torch.float16)  # squares overflow float16
    out = RMSNorm(2).half()(x)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()


def test_causal_mask_for_queries_at_the_end_of_the_keys():
    mask = causal_mask(2, 4, torch.device("cpu"))
    assert mask.tolist() == [[True, True, True, False], [True, True, True, True]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiled_linear_gives_a_row_the_same_bits_whatever_rows_come_with_it(dtype):
    """The codec's fixed tiles: a time step's projection does not depend on the sequence or chunk
    length it is computed in, and it matches F.linear closely."""
    from moss_cli.numerics.kernels import tiled_linear
    from moss_cli.numerics.tiles import RowTiles

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 48, generator=gen).to(dtype)
    bias = torch.randn(96, generator=gen).to(dtype)
    x = torch.randn(300, 48, generator=gen).to(dtype)
    whole = tiled_linear(x, weight, bias, RowTiles.whole(64))
    for start, length in ((0, 1), (5, 3), (64, 64), (100, 137), (299, 1)):
        part = tiled_linear(x[start : start + length], weight, bias, RowTiles.whole(64))
        assert torch.equal(part, whole[start : start + length]), (start, length)
    torch.testing.assert_close(whole.float(), F.linear(x, weight, bias).float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiles_the_probe_verifies_give_the_bits_of_64_row_tiles_padded_whole(dtype):
    """Where the probe finds that this platform rounds a row the same at every row count of a
    ladder (multiples of 4 up to 64, of 64 up to 256), a short last tile is padded to 4 rows, not
    64, long inputs run in 256-row tiles, and no bit changes."""
    from moss_cli.numerics.kernels import tiled_linear
    from moss_cli.numerics.probes import linears_agree
    from moss_cli.numerics.tiles import RowTiles

    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(96, 48, generator=gen).to(dtype)
    x = torch.randn(600, 48, generator=gen).to(dtype)
    whole = tiled_linear(x, weight, None, RowTiles.whole(64))
    for tiles in (RowTiles(64, 4), RowTiles(256, 4, 64)):
        if not linears_agree({(96, 48, False, dtype)}, 4, tiles.sizes, torch.device("cpu")):
            pytest.skip(f"this platform rounds a row differently at some row count of {tiles}")
        for length in (1, 5, 64, 70, 150, 256, 300, 600):
            assert torch.equal(tiled_linear(x[:length], weight, None, tiles), whole[:length]), (tiles, length)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_tiles_of_a_transposed_view_give_the_bits_of_contiguous_rows(dtype):
    """A lone clip hands a 1x1 conv's tiles a transposed view (leading dimension: the clip's
    length), a batch hands them copied rows; the plain GEMM rounds the two apart in bfloat16 and
    float64 (seen on an AVX2 CPU), so the tiles take row-major rows either way."""
    from moss_cli.numerics.kernels import tiled_linear
    from moss_cli.numerics.tiles import RowTiles

    gen = torch.Generator().manual_seed(2)
    weight = torch.randn(512, 256, generator=gen).to(dtype)
    channels_first = torch.randn(1, 256, 300, generator=gen).to(dtype)
    view = channels_first.transpose(1, 2)  # [1, T, C], not contiguous
    for tiles in (RowTiles.whole(64), RowTiles(256, 4, 64)):
        rows = tiled_linear(view.contiguous(), weight, None, tiles)
        assert torch.equal(tiled_linear(view, weight, None, tiles), rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_mlp_in_one_pass_over_the_tiles_gives_the_bits_of_two_tiled_products(dtype):
    """The codec's FFN runs both products tile by tile (its wide hidden rows never concatenated):
    a padding row's hidden is zero either way, so no bit changes."""
    from moss_cli.numerics import kernels
    from moss_cli.numerics.kernels import in_row_tiles, tiled_linear
    from moss_cli.numerics.tiles import RowTiles

    gen = torch.Generator().manual_seed(4)
    first, second = torch.randn(192, 48, generator=gen).to(dtype), torch.randn(48, 192, generator=gen).to(dtype)
    x = torch.randn(1, 333, 48, generator=gen).to(dtype)
    for tiles in (RowTiles.whole(64), RowTiles(64, 4), RowTiles(256, 4, 64)):
        two = tiled_linear(F.gelu(tiled_linear(x, first, None, tiles)), second, None, tiles)
        one = in_row_tiles(x, tiles, lambda t: kernels.linear(F.gelu(kernels.linear(t, first)), second))
        assert one.shape == (1, 333, 48) and torch.equal(one, two), tiles


def test_a_tile_ladder_pads_a_last_tile_to_its_smallest_size_that_holds_it():
    from moss_cli.numerics.tiles import RowTiles

    ladder = RowTiles(256, 4, 64)
    assert ladder.sizes == (*range(4, 64, 4), 64, 128, 192, 256)
    assert [ladder.padded(n) for n in (1, 4, 5, 63, 64, 65, 200, 256)] == [4, 4, 8, 64, 64, 128, 256, 256]
    assert str(ladder) == "256 rows, the last padded to 4 up to 64, to 64 beyond"
    assert RowTiles(64, 4).sizes == tuple(range(4, 65, 4)) and str(RowTiles(64, 4)) == "64 rows, the last padded to 4"
    assert RowTiles.whole(64).sizes == (64,) and str(RowTiles.whole(64)) == "64 rows, the last padded whole"
    for bad in ((64, 0), (64, 128), (64, 5), (200, 4, 64), (256, 4, 6)):
        with pytest.raises(ValueError):
            RowTiles(*bad)


def test_numerics_refuse_a_tall_codec_tile_that_is_not_a_multiple_of_the_tile():
    from moss_cli.numerics import Numerics

    assert Numerics(codec_tall_tile=128).codec_tall_tile == 128
    for tall in (0, 32, 100):
        with pytest.raises(ValueError, match="codec_tall_tile"):
            Numerics(codec_tall_tile=tall)
