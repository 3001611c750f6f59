"""What the codec's fixed tiles cost: plain vs tiled decode, with the batched-product tiles of 0.1.0
("bmm", a product over a broadcast weight) and the per-tile products used now ("per-tile"), in
float32 and bfloat16.

    python benchmarks/codec_tiles.py [--d-model 768] [--layers 2] [--frames 50] [--repeats 3]

A random codec in the v2 layout with every stage at `--d-model` decodes `--frames` frames (50 =
4 s); each figure is the median of the repeats, all variants in one process, 1 thread.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import moss_cli.model.codec as codec_module
from moss_cli.assets.build import CodecSizes, codec_config
from moss_cli.model.codec import AudioCodec
from moss_cli.model.config import CodecConfig
from moss_cli.model.layers import blocked_linear


def bmm_tiles(x, weight, bias=None, block=None):
    """0.1.0's fixed tiles: one batched product over the weight broadcast to every tile."""
    if not block:
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    rows = flat.shape[0]
    flat = F.pad(flat, (0, 0, 0, (-rows) % block))
    tiles = flat.shape[0] // block
    out = torch.bmm(flat.view(tiles, block, -1), weight.t().expand(tiles, -1, -1)).reshape(-1, weight.shape[0])
    if bias is not None:
        out = out + bias
    return out[:rows].reshape(*x.shape[:-1], weight.shape[0])


def random_codec(cfg: CodecConfig, tile: int | None, dtype: torch.dtype) -> AudioCodec:
    with torch.device("meta"):
        codec = AudioCodec(cfg, tile=tile)
    codec = codec.to_empty(device="cpu").to(dtype)
    with torch.no_grad():
        for p in codec.parameters():
            p.normal_(0, 0.02)
    codec.quantizer.float()
    return codec.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = CodecSizes(
        d_model=args.d_model,
        heads=args.d_model // 64,
        layers=args.layers,
        code_dim=128,
        rvq_dim=64,
        quantizers=16,
        codebook=1024,
        codebook_dim=8,
    )
    cfg = CodecConfig.from_dict(codec_config(sizes), "random codec")
    codes = torch.randint(0, 1024, (12, 1, args.frames))
    for dtype in (torch.float32, torch.bfloat16):
        codecs = {"plain": random_codec(cfg, None, dtype), "tiled": random_codec(cfg, 64, dtype)}
        seconds = {}
        for impl_name, impl in (("bmm", bmm_tiles), ("per-tile", blocked_linear)):
            codec_module.blocked_linear = impl
            for name, codec in codecs.items():
                with torch.inference_mode():
                    codec.decode(codes)
                    runs = []
                    for _ in range(args.repeats):
                        start = time.perf_counter()
                        codec.decode(codes)
                        runs.append(time.perf_counter() - start)
                seconds[(impl_name, name)] = statistics.median(runs)
        codec_module.blocked_linear = blocked_linear
        for impl_name in ("bmm", "per-tile"):
            plain, tiled = seconds[(impl_name, "plain")], seconds[(impl_name, "tiled")]
            print(
                f"{str(dtype):>15} {impl_name:>8}: plain {plain:.3f} s, tiled {tiled:.3f} s, tiled/plain "
                f"{tiled / plain:.2f}"
            )


if __name__ == "__main__":
    main()
