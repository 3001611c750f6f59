"""Generation for one left-padded batch on the engine: `Talker.generate` (the Python API).

`generate_invariant` gives each row the result it would have alone: padding is stripped and the
rows are prefilled and decoded by the batch-invariant engine. The reference's own padded-batch
loop is `reference.generate_padded`.
"""

from __future__ import annotations

import torch

from ..model.talker import MossTTSLocal
from ..sampling_params import HeadSampling
from .reference import Generators
from .requests import GenerationRequest
from .scheduler import Engine


def generate_invariant(
    model: MossTTSLocal,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_frames: int,
    do_sample: bool,
    audio: HeadSampling,
    stop: HeadSampling,
    generators: Generators = None,
) -> list[torch.Tensor]:
    """Each row decoded as if alone. A single shared generator (or the global RNG) is drawn from
    row by row in batch order; per-row generators make rows fully independent."""
    batch = input_ids.shape[0]
    mask = attention_mask.to(torch.bool)
    requests = []
    for i in range(batch):
        per_row = generators[i] if isinstance(generators, (list, tuple)) else generators
        requests.append(
            GenerationRequest(
                key=str(i),
                prompt=input_ids[i][mask[i].to(input_ids.device)],
                max_new_frames=max_new_frames,
                audio=audio,
                stop=stop,
                rng=per_row,
                do_sample=do_sample,
            )
        )
    engine = Engine(model, max_batch=batch)
    results = {r.key: r.codes for r in engine.run(requests)}
    return [results[str(i)] for i in range(batch)]
