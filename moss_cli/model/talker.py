"""The MOSS-TTS-Local talker: Qwen3 backbone + local depth transformer + heads.

Pure computation: no sampling, no caches of its own, no I/O. The engine drives it one frame at a
time (see `moss_cli.engine`).

Per frame and row: the backbone's last hidden state is local position 0; the local output there
feeds the binary stop head and audio head 0; for k >= 1 the local input is
`audio_embeddings[k-1](c_{k-1})` and its output feeds audio head k. Audio heads are tied to the
audio embeddings and the text head to `embed_tokens`, so neither is stored separately.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..numerics import kernels
from ..numerics.kernels import as_dtype
from .backbone import AttentionCache, Qwen3Backbone
from .config import TalkerConfig
from .layers import Linear
from .local import LocalPast, LocalTransformer

CONTINUE, STOP = 0, 1  # columns of the binary stop head: [audio_assistant_slot, audio_end]


class MossTTSLocal(nn.Module):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.transformer = Qwen3Backbone(cfg.backbone)
        self.local_transformer = LocalTransformer(cfg.local)
        self.audio_embeddings = nn.ModuleList(nn.Embedding(size, cfg.hidden_size) for size in cfg.audio_codebook_sizes)
        if cfg.local_text_head_mode == "binary":
            self.local_text_lm_head = Linear(cfg.hidden_size, 2, bias=False)
        self.packed_heads: list[torch.Tensor] | None = None  # the audio heads packed for oneDNN (pack_weights)

    @property
    def packed(self) -> bool:
        return self.packed_heads is not None

    @torch.no_grad()
    def pack_weights(self) -> bool:
        """Lay every linear weight, and the audio heads, out for the CPU's oneDNN product (faster
        eager decoding; `moss_cli.numerics.kernels`). Each packed weight replaces its plain one, except the
        audio heads, which keep their embedding tables. A packed model can no longer be compiled,
        saved or moved to another device. False where packing is not available (GPU, float64, no oneDNN)."""
        if self.packed or not kernels.can_pack(self.audio_embeddings[0].weight):
            return self.packed
        kernels.pack_linears(self)
        self.packed_heads = [kernels.pack(table.weight) for table in self.audio_embeddings]
        return True

    # Tied heads, named as the reference names them in `_tied_weights_keys`.
    TIED = {"text_lm_head.weight": "transformer.embed_tokens.weight"}

    @classmethod
    def tied_keys(cls, cfg: TalkerConfig) -> dict[str, str]:
        tied = dict(cls.TIED)
        tied.update({f"audio_lm_heads.{k}.weight": f"audio_embeddings.{k}.weight" for k in range(cfg.n_vq)})
        return tied

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Rows [B, T, 1 + n_vq] -> embed_tokens(text) + sum_k audio_embeddings[k](c_k); pad codes add 0."""
        x = self.transformer.embed_tokens(input_ids[..., 0])
        codes = input_ids[..., 1:]
        valid = codes.ne(self.cfg.audio_pad_code)
        safe, keep = codes.masked_fill(~valid, 0), valid.unsqueeze(-1).to(x.dtype)  # keep: 1 or 0 per code
        for k, table in enumerate(self.audio_embeddings):
            x = x + F.embedding(safe[..., k], table.weight) * keep[..., k, :]
        return x

    def backbone(
        self, embeds: torch.Tensor, positions: torch.Tensor, cache: AttentionCache | None = None
    ) -> torch.Tensor:
        return self.transformer(embeds, positions, cache)

    def local(self, x: torch.Tensor, start: int, past: LocalPast | None = None) -> tuple[torch.Tensor, LocalPast]:
        return self.local_transformer(as_dtype(x, self.local_transformer.ln_f.weight.dtype), start, past)

    def stop_logits(self, local_hidden: torch.Tensor) -> torch.Tensor:
        """[B, H] -> [B, 2] logits for (continue, stop)."""
        if self.cfg.local_text_head_mode == "binary":
            return self.local_text_lm_head(local_hidden)
        # The two columns picked by Python indices: a tensor of ids would be copied to the device
        # at every frame (a host sync, and nothing a CUDA graph can capture).
        logits = F.linear(local_hidden, self.transformer.embed_tokens.weight)
        slot, end = self.cfg.audio_assistant_slot_token_id, self.cfg.audio_end_token_id
        return torch.stack([logits[:, slot], logits[:, end]], -1)

    def audio_logits(self, codebook: int, local_hidden: torch.Tensor) -> torch.Tensor:
        """[B, H] -> [B, codebook_size] through the head tied to audio_embeddings[codebook]."""
        if self.packed_heads is not None:
            return kernels.linear(local_hidden, self.packed_heads[codebook])
        return F.linear(local_hidden, self.audio_embeddings[codebook].weight)

    def code_embedding(self, codebook: int, codes: torch.Tensor) -> torch.Tensor:
        """Local input after sampling `codes` [B] of `codebook`: [B, 1, H]."""
        return F.embedding(codes, self.audio_embeddings[codebook].weight).unsqueeze(1)
