"""What the codec's fixed tiles cost: plain vs tiled decode, with the batched-product tiles of 0.1.0
("old-bmm") and the per-tile products used now ("new-loop"), in float32 and bfloat16.

    python benchmarks/codec_tiles.py

A random codec in the v2 layout with every stage at d=768 (2 layers each) decodes 4 s of codes
(50 frames); each figure is the median of 3 decodes in one process, 1 thread.
"""

import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
import moss_cli.model.codec as C
import moss_cli.model.layers as L
from moss_cli.assets.build import CodecSizes, codec_config
from moss_cli.model.codec import AudioCodec
from moss_cli.model.config import CodecConfig


def old_blocked(x, weight, bias=None, block=None):
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


new_blocked = L.blocked_linear
cfg = CodecConfig.from_dict(
    codec_config(
        CodecSizes(
            d_model=768, heads=12, layers=2, code_dim=128, rvq_dim=64, quantizers=16, codebook=1024, codebook_dim=8
        )
    ),
    "x",
)
for dtype in (torch.float32, torch.bfloat16):
    codecs = {}
    for name, tile in (("plain", None), ("tiled", 64)):
        with torch.device("meta"):
            c = AudioCodec(cfg, tile=tile)
        c = c.to_empty(device="cpu").to(dtype)
        with torch.no_grad():
            for p in c.parameters():
                p.normal_(0, 0.02)
        c.quantizer.float()
        codecs[name] = c.eval()
    codes = torch.randint(0, 1024, (12, 1, 50))
    res = {}
    for impl_name, impl in (("old-bmm", old_blocked), ("new-loop", new_blocked)):
        L.blocked_linear = impl
        C.blocked_linear = impl
        for name, c in codecs.items():
            with torch.inference_mode():
                c.decode(codes)
                ts = []
                for _ in range(3):
                    t = time.perf_counter()
                    c.decode(codes)
                    ts.append(time.perf_counter() - t)
            res[(impl_name, name)] = statistics.median(ts)
    print(
        dtype,
        {f"{a}/{b}": round(v, 3) for (a, b), v in res.items()},
        "tiled/plain old",
        round(res[("old-bmm", "tiled")] / res[("old-bmm", "plain")], 2),
        "new",
        round(res[("new-loop", "tiled")] / res[("new-loop", "plain")], 2),
    )
