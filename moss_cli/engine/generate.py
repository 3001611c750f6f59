"""Generation for one left-padded batch: the loop behind `Talker.generate` (the Python API).

`generate_padded` has the reference talker's semantics exactly: the whole batch is prefilled
together, then every step runs the backbone on one new row per request; a row that stops gets
`[pad, pad codes]` rows with attention mask 0 from then on. `generate_invariant` gives each row
the result it would have alone: padding is stripped and the rows are prefilled and decoded by
the batch-invariant engine.
"""

from __future__ import annotations

import torch

from ..model.talker import MossTTSLocal
from ..sampling_params import HeadSampling
from .frame import STOP_HEAD, choose_codes, choose_stop, start_frame
from .kv_cache import PaddedBatchCache
from .sampling import Generators, sample
from .scheduler import Engine, GenerationRequest


@torch.inference_mode()
def generate_padded(
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
    cfg = model.cfg
    batch, device = input_ids.shape[0], input_ids.device
    mask = attention_mask.to(device=device, dtype=torch.bool)
    rows = input_ids
    cache = PaddedBatchCache()
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    frames: list[torch.Tensor] = []
    lengths = torch.zeros(batch, dtype=torch.long, device=device)

    for _ in range(max_new_frames):
        history = torch.stack(frames, dim=1) if frames else None  # [B, F, n_vq]

        def choose(codebook: int, logits: torch.Tensor) -> torch.Tensor:
            if codebook == STOP_HEAD:
                return sample(logits, [stop] * batch, do_sample=do_sample, generators=generators)
            histories = None if history is None else [history[i, :, codebook] for i in range(batch)]
            return sample(logits, [audio] * batch, do_sample=do_sample, histories=histories, generators=generators)

        positions = (mask.long().cumsum(-1) - 1).masked_fill(~mask, 0)[:, -rows.shape[1] :]
        cache.key_mask = mask
        hidden = model.backbone(model.embed(rows), positions, cache)[:, -1]
        local_hidden, past = start_frame(model, hidden)
        stops = choose_stop(model, local_hidden, choose)
        continuing = ~stops & ~finished
        finished |= stops
        if not bool(continuing.any()):
            break
        codes = choose_codes(model, local_hidden, past, choose)
        frame = codes.masked_fill(~continuing[:, None], cfg.audio_pad_code)
        frames.append(frame)
        lengths += continuing.long()

        rows = torch.full((batch, 1, cfg.n_vq + 1), cfg.audio_pad_code, dtype=torch.long, device=device)
        rows[:, 0, 0] = torch.where(continuing, cfg.audio_assistant_slot_token_id, cfg.pad_token_id)
        rows[:, 0, 1:] = frame
        mask = torch.cat([mask, continuing[:, None]], dim=1)

    stacked = torch.stack(frames, dim=1) if frames else torch.zeros(batch, 0, cfg.n_vq, dtype=torch.long, device=device)
    return [stacked[i, : int(lengths[i])].cpu() for i in range(batch)]


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
