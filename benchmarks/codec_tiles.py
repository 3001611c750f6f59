"""What the codec's fixed tiles cost: plain decode vs the batch-invariant tiled decode in tiles of
64 rows (the last padded whole, as on any platform, or to 4 rows) and in the tiles the load-time
probe verified here (taller ones where it can).

    python benchmarks/codec_tiles.py [--shapes v2|small] [--frames 50] [--repeats 4] \
        [--dtype bfloat16|float32] [--threads 2] [--no-pack]

`--shapes v2` is a random decoder at the published v2 sizes (stage 0: 32 layers, d=1280, 20 heads,
FFN 5120; stages 1-5: 12 layers, d=768, 12 heads, FFN 3072; about 1.06 B decoder parameters; the
encoder, unused by decode, is shrunk). `--frames 50` is 4 s of audio. The variants run
alternately on one set of weights in one process; the table gives medians with [min-max]. The
weights are packed for oneDNN as `load_codec` packs them, unless `--no-pack`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from moss_cli.assets.build import CodecSizes, codec_config
from moss_cli.model.codec import AudioCodec
from moss_cli.model.config import CodecConfig
from moss_cli.numerics import INVARIANT
from moss_cli.numerics.layout import codec_tiles
from moss_cli.numerics.tiles import RowTiles


def v2_config(small: bool) -> CodecConfig:
    d = 256 if small else 768
    raw = codec_config(
        CodecSizes(
            d_model=d, heads=d // 64, layers=2 if small else 12, code_dim=128, rvq_dim=64, quantizers=32,
            codebook=1024, codebook_dim=8,
        )
    )  # fmt: skip
    for stage in raw["encoder_kwargs"]:
        if stage["module_type"] == "Transformer":
            stage.update(num_layers=1)
    for stage in raw["decoder_kwargs"]:
        if stage["module_type"] == "Transformer":
            stage.update(dim_feedforward=4 * d)
    if not small:
        raw["decoder_kwargs"][0].update(d_model=1280, num_heads=20, dim_feedforward=5120, num_layers=32)
    return CodecConfig.from_dict(raw, "random v2-shaped codec")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", choices=["v2", "small"], default="v2")
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-pack", action="store_true", help="keep the plain weights (no oneDNN packing)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    with torch.device("meta"):
        codec = AudioCodec(v2_config(args.shapes == "small"))
    codec = codec.to_empty(device="cpu").to(dtype)
    with torch.no_grad():
        for p in codec.parameters():
            p.normal_(0, 0.02)
    codec.quantizer.float()  # as load_codec
    codec.eval()
    if not args.no_pack:
        codec.pack_weights()
    start = time.perf_counter()
    verified = codec_tiles(codec, INVARIANT)
    probe = time.perf_counter() - start
    tile = INVARIANT.codec_tile
    variants = {
        "plain": None,
        f"tiles of {tile}, padded whole": RowTiles.whole(tile),
        f"tiles of {tile}, padded to {INVARIANT.pad_unit}": RowTiles(tile, INVARIANT.pad_unit),
    }
    variants[f"verified: {verified}"] = verified
    codes = torch.randint(0, 1024, (12, 1, args.frames))
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    pcm = {}
    with torch.inference_mode():
        codec.decode(codes)  # warm-up
        for _ in range(args.repeats):
            for name, tiles in variants.items():
                codec.tiles = tiles
                start = time.perf_counter()
                pcm[name] = codec.decode(codes)
                seconds[name].append(time.perf_counter() - start)
    params = sum(p.numel() for p in codec.decoder.parameters()) / 1e9
    kernel = "packed" if codec.packed else "plain"
    print(
        f"{args.shapes} decoder ({params:.2f} B params), {args.dtype}, {args.threads} threads, {args.frames} frames, "
        f"{kernel} weights; the probe took {probe:.1f} s"
    )
    plain = statistics.median(seconds["plain"])
    for name, runs in seconds.items():
        median = statistics.median(runs)
        print(f"{name:>32}: {median:.3f} s [{min(runs):.3f}-{max(runs):.3f}]  / plain {median / plain:.3f}")
    tiled = [pcm[name] for name in variants if name != "plain"]
    print("tiled variants bitwise equal:", all(torch.equal(tiled[0], other) for other in tiled[1:]))


if __name__ == "__main__":
    main()
