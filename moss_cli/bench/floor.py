"""The floor a decode step is measured against, and the bound on what any engine could reach.

The floor: the step's weight-shaped matrix products alone, in the order a frame runs them, with the
engine's kernels. The bound: the floor plus the least reading of the KV cache that exact attention
needs at every step (`kv_read_step`); floor / (floor + that reading) is the most efficiency an
engine with no other cost would report.

Timed products mean something on a CPU, where each product is long next to its launch; on an
accelerator they are launch-bound. There the physical bound counts instead: the bytes a step must read
(`step_bytes`: every weight of the floor as many times as the step reads it, plus the KV cache
once) over the memory bandwidth the device reaches in a large copy (`copy_bandwidth`).
"""

from __future__ import annotations

import statistics
import time

import torch

from ..model.talker import MossTTSLocal
from ..numerics import kernels


def sync(device: torch.device) -> None:
    """Wait for queued accelerator work, so wall-clock readings cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def floor_step(model: MossTTSLocal, rows: int) -> float:
    """One decode step's weight-shaped matrix products alone, with the kernels the engine uses
    (oneDNN on packed weights where the model is packed)."""
    return time_products(floor_weights(model), rows)


@torch.inference_mode()
def time_products(weights: list[torch.Tensor], rows: int) -> float:
    """Seconds for `rows` rows through each weight in turn, nothing between the products."""
    x = torch.randn(rows, max(w.shape[1] for w in weights), device=weights[0].device, dtype=weights[0].dtype)
    inputs = {width: x[:, :width].contiguous() for width in {w.shape[1] for w in weights}}
    sync(x.device)
    start = time.perf_counter()
    for w in weights:
        kernels.linear(inputs[w.shape[1]], w)
    sync(x.device)
    return time.perf_counter() - start


def floor_weights(model: MossTTSLocal) -> list[torch.Tensor]:
    """The weights of one decode step's products in the order the step reads them: every backbone
    projection, then the local layer at each of the n_vq positions (position 0 is the backbone's
    state, position k the code of codebook k-1), each followed by the head it feeds (the stop head
    and head 0 after position 0). The order matters where a cache holds the local layer alone but
    not the local layer and a head."""
    weights = []
    for layer in model.transformer.layers:
        weights += [m.weight for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    local = [m.weight for m in model.local_transformer.modules() if isinstance(m, torch.nn.Linear)]
    heads = model.packed_heads or [e.weight for e in model.audio_embeddings]
    # the stop head: two rows, or in full_vocab mode the whole text vocabulary (talker.stop_logits)
    binary = model.cfg.local_text_head_mode == "binary"
    stop = model.local_text_lm_head.weight if binary else model.transformer.embed_tokens.weight
    for k, head in enumerate(heads):
        weights += local + ([stop] if k == 0 else []) + [head]
    return weights


@torch.inference_mode()
def kv_read_step(model: MossTTSLocal, rows: int, length: int, repeats: int = 3) -> float:
    """The least memory traffic of one decode step's attention: each backbone layer's keys and
    values read once, by one query row per head (grouped-query heads share their KV head's reads),
    for `rows` requests holding `length` positions; the median of `repeats` reads of one cache.
    No engine can attend for less."""
    cfg = model.cfg.backbone
    param = next(model.parameters())
    shape = (rows, cfg.num_kv_heads, length, cfg.head_dim)
    caches = [
        (
            torch.randn(shape, device=param.device, dtype=param.dtype),
            torch.randn(shape, device=param.device, dtype=param.dtype),
        )
        for _ in range(cfg.num_layers)
    ]
    q = torch.randn(
        rows, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim, device=param.device, dtype=param.dtype
    )
    seconds = []
    for _ in range(repeats):
        sync(param.device)
        start = time.perf_counter()
        for k, v in caches:
            torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1), v)
        sync(param.device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def weight_bytes(model: MossTTSLocal) -> int:
    """Bytes of the weights one decode step reads, each counted as many times as the step reads it
    (the local layer and its heads once per codebook position: `floor_weights`)."""
    return sum(w.numel() * w.element_size() for w in floor_weights(model))


def kv_bytes(model: MossTTSLocal, rows: int, length: int) -> int:
    """Bytes of one read of every backbone layer's keys and values, for `rows` requests holding
    `length` positions (what `kv_read_step` reads)."""
    cfg = model.cfg.backbone
    size = next(model.parameters()).element_size()
    return 2 * cfg.num_layers * rows * cfg.num_kv_heads * length * cfg.head_dim * size


def step_bytes(model: MossTTSLocal, rows: int, length: int) -> int:
    """The least bytes one decode step of `rows` requests at cache length `length` must read."""
    return weight_bytes(model) + kv_bytes(model, rows, length)


COPY_BYTES = 128 * 2**20  # each of the copy's two buffers: far beyond any CPU's or GPU's caches


@torch.inference_mode()
def copy_bandwidth(device: torch.device, nbytes: int = COPY_BYTES, repeats: int = 5) -> float:
    """Bytes per second the device's memory moves in a large copy, counting the bytes read and the
    bytes written (2 x `nbytes` a copy): the median of `repeats` timed copies after one untimed."""
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    seconds = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        sync(device)
        seconds.append(time.perf_counter() - start)
    return 2 * nbytes / statistics.median(seconds)
