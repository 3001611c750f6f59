"""MOSS-Audio-Tokenizer: residual (LFQ) dequantisation and the decoder stage list.

Decode = sum over the first nq quantizers of out_proj(codebook[c]) (float32), then the
quantizer's output_proj, then the decoder stages in order: causal sliding-window transformers
(interleaved RoPE, layer scale) and patch reshapes. Version 2 decodes one interleaved stream
(L0 R0 L1 R1 ...) that is split back into channels at the end.

State-dict names follow the v2 release (`self_attn.in_proj`, `self_attn.out_proj`, `ffn.0`,
`ffn.2`); v1 names (`self_attn.in_projs.0`, `out_projs.0`, `linear1`, `linear2`) and the legacy
weight-norm names (`weight_g`, `weight_v`) are mapped onto them when loading
(see `canonical_codec_key`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..numerics import kernels
from ..numerics.attention import aligned_attention
from ..numerics.kernels import in_row_tiles, tiled_linear
from ..numerics.tiles import RowTiles
from .config import CodecConfig, CodecStage, QuantizerConfig
from .layers import codec_rope

# Queries are processed in blocks so that attention memory stays O(T * (block + context)).
ATTENTION_BLOCK = 1024


class WeightNormConv1x1(nn.Module):
    """A weight-normed kernel-1 Conv1d stored as `parametrizations.weight.original0/1` + `bias`."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.parametrizations = nn.Module()
        self.parametrizations.weight = nn.Module()
        self.parametrizations.weight.original0 = nn.Parameter(torch.ones(out_dim, 1, 1))
        self.parametrizations.weight.original1 = nn.Parameter(torch.randn(out_dim, in_dim, 1))
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def weight(self) -> torch.Tensor:
        # g * v / ||v|| with the norm over all dims but the output channel.
        w = self.parametrizations.weight
        return torch._weight_norm(w.original1, w.original0, 0)

    def forward(self, x: torch.Tensor, tiles: RowTiles | None = None) -> torch.Tensor:
        if tiles is None:
            return F.conv1d(x, self.weight(), self.bias)
        # A 1x1 convolution is a linear map of each time step: computed in fixed row tiles.
        return tiled_linear(x.transpose(1, 2), self.weight().squeeze(-1), self.bias, tiles).transpose(1, 2)


def _project(module: nn.Module, x: torch.Tensor, tiles: RowTiles | None) -> torch.Tensor:
    """An optional projection (Identity when the dimensions already match), in fixed row tiles
    when `tiles` is set: a weight-normed 1x1 conv on [B, C, T] or a Linear on [..., D]."""
    if isinstance(module, nn.Identity):
        return x
    if isinstance(module, nn.Linear):
        return tiled_linear(x, module.weight, module.bias, tiles)
    return module(x, tiles)


class Quantizer(nn.Module):
    """Residual quantizer; decode only needs the codebooks and projections."""

    def __init__(self, cfg: QuantizerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_proj = (
            WeightNormConv1x1(cfg.input_dim, cfg.rvq_dim) if cfg.input_dim != cfg.rvq_dim else nn.Identity()
        )
        self.output_proj = (
            WeightNormConv1x1(cfg.rvq_dim, cfg.output_dim) if cfg.rvq_dim != cfg.output_dim else nn.Identity()
        )
        self.quantizers = nn.ModuleList(_Codebook(cfg) for _ in range(cfg.num_quantizers))

    def encode(self, latents: torch.Tensor, lengths: torch.Tensor, nq: int) -> torch.Tensor:
        """Residual quantisation of encoder latents [B, input_dim, T] -> codes [nq, B, T] (float32 math).

        Positions at or beyond each row's length are masked out of the residual, as in the reference."""
        z = self.input_proj(latents.float()).float()
        b, _, t = z.shape
        mask = (torch.arange(t, device=z.device)[None, :] < lengths[:, None]).unsqueeze(1)
        residual = z.clone()
        codes = []
        for quantizer in self.quantizers[:nq]:
            z_q, indices = quantizer.quantize(residual * mask)
            residual = residual - z_q * mask
            codes.append(indices)
        return torch.stack(codes) if codes else torch.empty(0, b, t, dtype=torch.long, device=z.device)

    def decode(self, codes: torch.Tensor, tiles: RowTiles | None = None) -> torch.Tensor:
        """codes [nq, B, T] -> latents [B, output_dim, T] in float32."""
        nq, b, t = codes.shape
        latents = torch.zeros(b, self.cfg.rvq_dim, t, device=codes.device, dtype=torch.float32)
        for i in range(nq):
            latents += self.quantizers[i].decode(codes[i], tiles)
        return _project(self.output_proj, latents, tiles)


class _Codebook(nn.Module):
    def __init__(self, cfg: QuantizerConfig) -> None:
        super().__init__()
        project = cfg.rvq_dim != cfg.codebook_dim
        self.in_proj = WeightNormConv1x1(cfg.rvq_dim, cfg.codebook_dim) if project else nn.Identity()
        self.out_proj = WeightNormConv1x1(cfg.codebook_dim, cfg.rvq_dim) if project else nn.Identity()
        self.codebook = nn.Embedding(cfg.codebook_size, cfg.codebook_dim)
        self.lfq = cfg.kind == "rlfq"

    def quantize(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z [B, rvq_dim, T] -> (projected code vectors [B, rvq_dim, T], indices [B, T]).

        LFQ: project in, L2-normalise both the latent and the codebook, take the nearest entry
        (squared distance), and return that entry's *unnormalised* vector projected out."""
        z_e = self.in_proj(z.float()).float()
        rows = z_e.transpose(1, 2).reshape(-1, z_e.shape[1])
        book = self.codebook.weight.float()
        if self.lfq:
            rows, book = F.normalize(rows), F.normalize(book)
        dist = rows.pow(2).sum(1, keepdim=True) - 2 * rows @ book.t() + book.pow(2).sum(1, keepdim=True).t()
        indices = (-dist).max(1)[1].reshape(z.shape[0], -1)
        z_q = F.embedding(indices, self.codebook.weight).transpose(1, 2).float()
        z_q = (z_e + (z_q - z_e)).float()  # the reference's straight-through form, kept for identical rounding
        return self.out_proj(z_q).float(), indices

    def decode(self, codes: torch.Tensor, tiles: RowTiles | None = None) -> torch.Tensor:
        """codes [B, T] -> [B, rvq_dim, T] (float32)."""
        vectors = F.embedding(codes, self.codebook.weight).transpose(1, 2).float()
        return _project(self.out_proj, vectors, tiles).float()


class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


@dataclass
class LayerState:
    """Streaming state of one attention layer: the last context-1 keys/values (after RoPE) and the
    absolute position of the next input step."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    offset: int = 0


class CodecAttention(nn.Module):
    def __init__(self, stage: CodecStage, context: int | None) -> None:
        super().__init__()
        self.num_heads = stage.num_heads
        self.context = context
        self.causal = stage.causal
        self.rope_period = stage.max_period if stage.positional_embedding == "rope" else None
        self.in_proj = nn.Linear(stage.d_model, 3 * stage.d_model, bias=False)
        self.out_proj = nn.Linear(stage.d_model, stage.d_model, bias=False)

    def forward(self, x: torch.Tensor, state: LayerState | None = None, tiles: RowTiles | None = None) -> torch.Tensor:
        b, t, d = x.shape
        qkv = tiled_linear(x, self.in_proj.weight, None, tiles)
        q, k, v = qkv.reshape(b, t, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        offset = state.offset if state is not None else 0
        if self.rope_period is not None:
            q, k = codec_rope(q, k, offset, self.rope_period)
        first_key = offset
        if state is not None and state.keys is not None:
            first_key = offset - state.keys.shape[2]
            k, v = torch.cat([state.keys, k], dim=2), torch.cat([state.values, v], dim=2)
        if not self.causal:
            if state is not None:
                raise ValueError("streaming needs causal attention")
            out = F.scaled_dot_product_attention(q, k, v)
        elif tiles is not None:
            out = aligned_attention(q, k, v, offset, first_key, self.context)
        else:
            out = torch.cat(
                [
                    self._causal_block(q, k, v, offset, first_key, start, min(start + ATTENTION_BLOCK, t))
                    for start in range(0, t, ATTENTION_BLOCK)
                ],
                dim=2,
            )
        if state is not None:
            drop = 0 if self.context is None else max(0, k.shape[2] - (self.context - 1))
            state.keys, state.values = k[:, :, drop:], v[:, :, drop:]
            state.offset += t
        return tiled_linear(out.transpose(1, 2).reshape(b, t, d), self.out_proj.weight, None, tiles)

    def _causal_block(self, q, k, v, q0: int, k0: int, start: int, stop: int) -> torch.Tensor:
        """Queries start..stop-1 (absolute q0 + i) see keys j (absolute k0 + j) with 0 <= i - j < context."""
        lo = q0 + start - k0 - (self.context - 1 if self.context is not None else q0 + start - k0)
        lo = max(0, lo)
        q_pos = torch.arange(q0 + start, q0 + stop, device=q.device)[:, None]
        k_pos = torch.arange(k0 + lo, k0 + (q0 + stop - k0), device=q.device)[None, :]
        delta = q_pos - k_pos
        mask = delta >= 0
        if self.context is not None:
            mask &= delta < self.context
        hi = q0 + stop - k0
        return F.scaled_dot_product_attention(q[:, :, start:stop], k[:, :, lo:hi], v[:, :, lo:hi], attn_mask=mask)


class CodecLayer(nn.Module):
    def __init__(self, stage: CodecStage, context: int | None) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(stage.d_model, eps=1e-5)
        self.self_attn = CodecAttention(stage, context)
        self.norm2 = nn.LayerNorm(stage.d_model, eps=1e-5)
        self.ffn = nn.Sequential(
            nn.Linear(stage.d_model, stage.dim_feedforward, bias=False),
            nn.GELU(),
            nn.Linear(stage.dim_feedforward, stage.d_model, bias=False),
        )
        scale = stage.layer_scale
        self.layer_scale_1 = LayerScale(stage.d_model, scale) if scale is not None else nn.Identity()
        self.layer_scale_2 = LayerScale(stage.d_model, scale) if scale is not None else nn.Identity()

    def forward(self, x: torch.Tensor, state: LayerState | None = None, tiles: RowTiles | None = None) -> torch.Tensor:
        update = self.self_attn(self.norm1(x), state, tiles)
        x = x.to(update) + self.layer_scale_1(update)
        first, second = self.ffn[0].weight, self.ffn[2].weight
        # Both products in one pass over the tiles: the wide hidden rows are never concatenated.
        update = in_row_tiles(self.norm2(x), tiles, lambda t: kernels.linear(F.gelu(kernels.linear(t, first)), second))
        return x.to(update) + self.layer_scale_2(update)


class TransformerStage(nn.Module):
    """input_proj -> causal transformer -> output_proj, on [B, D, T] ("conv layout") tensors."""

    def __init__(self, stage: CodecStage, context: int | None) -> None:
        super().__init__()
        self.stage = stage
        self.input_proj = (
            nn.Linear(stage.input_dimension, stage.d_model, bias=False)
            if stage.input_dimension != stage.d_model
            else nn.Identity()
        )
        self.transformer = nn.Module()
        self.transformer.layers = nn.ModuleList(CodecLayer(stage, context) for _ in range(stage.num_layers))
        self.output_proj = (
            nn.Linear(stage.d_model, stage.output_dimension, bias=False)
            if stage.output_dimension != stage.d_model
            else nn.Identity()
        )

    def forward(
        self, x: torch.Tensor, states: list[LayerState] | None = None, tiles: RowTiles | None = None
    ) -> torch.Tensor:
        x = _project(self.input_proj, x.transpose(1, 2), tiles)
        for i, layer in enumerate(self.transformer.layers):
            x = layer(x, None if states is None else states[i], tiles)
        return _project(self.output_proj, x, tiles).transpose(1, 2)


class PatchStage(nn.Module):
    """Pure reshape: encode folds `patch_size` steps into channels, decode unfolds them."""

    def __init__(self, patch_size: int, downsample: bool) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, d, t = x.shape
        h = self.patch_size
        if self.downsample:  # [B, D, T*h] -> [B, D*h, T]
            return x.reshape(b, d, -1, h).permute(0, 1, 3, 2).reshape(b, d * h, -1)
        # [B, D*h, T] -> [B, D, T*h]
        return x.reshape(b, d // h, h, t).permute(0, 1, 3, 2).reshape(b, d // h, t * h)


def _context_frames(stage: CodecStage, frame_rate: float, default_duration: float) -> int | None:
    if not stage.causal:
        return None
    if stage.context_duration is not None:  # v2: per-stage window, rounded
        return int(round(frame_rate * stage.context_duration))
    return int(frame_rate * default_duration)  # v1: one window duration for all stages


class AudioCodec(nn.Module):
    """The codec network. `decode` maps codes [nq, B, T] to audio [B, channels, T * downsample_rate]."""

    def __init__(self, cfg: CodecConfig, tiles: RowTiles | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        rate = float(cfg.sampling_rate * (cfg.channels if cfg.interleave else 1))
        self.encoder = nn.ModuleList()
        for stage in cfg.encoder:
            if stage.kind == "patch":
                self.encoder.append(PatchStage(stage.patch_size, downsample=True))
                rate /= stage.patch_size
            else:
                self.encoder.append(TransformerStage(stage, _context_frames(stage, rate, cfg.context_duration)))
        self.quantizer = Quantizer(cfg.quantizer)
        # Rows per GEMM tile: fixed tiles make a request's waveform independent of what it is decoded
        # with, and chunked (streaming) decode bitwise equal to a whole decode. None: plain kernels.
        self.tiles = tiles
        rate = rate if cfg.encoder else cfg.frame_rate
        self.decoder = nn.ModuleList()
        for stage in cfg.decoder:
            if stage.kind == "patch":
                self.decoder.append(PatchStage(stage.patch_size, downsample=False))
                rate *= stage.patch_size
            else:
                self.decoder.append(TransformerStage(stage, _context_frames(stage, rate, cfg.context_duration)))

    @property
    def packed(self) -> bool:
        return any(m.weight.is_mkldnn for m in self.modules() if isinstance(m, nn.Linear))

    @torch.no_grad()
    def pack_weights(self) -> bool:
        """Lay the transformer stages' linear weights out for the CPU's oneDNN product (faster; see
        `moss_cli.numerics.kernels`); each packed weight replaces its plain one. A packed codec can no longer
        be saved or moved to another device. False where packing is not available."""
        linears = [m for m in self.modules() if isinstance(m, nn.Linear)]
        if not linears or not kernels.can_pack(linears[0].weight):
            return self.packed
        kernels.pack_linears(self)
        return True

    def tiled_shapes(self) -> set[tuple[int, int, bool, torch.dtype]]:
        """(out, in, has bias, dtype) of every product `decode` computes in row tiles (biases are
        added after the product), for a probe of how this platform rounds them."""
        shapes: set[tuple[int, int, bool, torch.dtype]] = set()
        for module in (self.quantizer, self.decoder):
            for m in module.modules():
                if isinstance(m, nn.Linear):
                    shapes.add((*m.weight.shape, False, m.weight.dtype))
                elif isinstance(m, WeightNormConv1x1):
                    v = m.parametrizations.weight.original1
                    shapes.add((v.shape[0], v.shape[1], False, v.dtype))
        return shapes

    @property
    def sample_rate(self) -> int:
        return self.cfg.sampling_rate

    @property
    def channels(self) -> int:
        return self.cfg.channels

    @property
    def frame_rate(self) -> float:
        return self.cfg.frame_rate

    @property
    def num_quantizers(self) -> int:
        return self.cfg.quantizer.num_quantizers

    @torch.inference_mode()
    def encode(
        self, audio: torch.Tensor, num_quantizers: int | None = None, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """audio [B, channels, samples] at `sample_rate` -> (codes [nq, B, T], code lengths [B]).

        Samples are zero-padded to a multiple of `downsample_rate`; a trailing partial frame is
        encoded but not counted in the lengths (as in the reference). Version 2 interleaves the
        channels into one stream (L0 R0 L1 R1 ...) before the encoder."""
        if audio.dim() != 3 or audio.shape[1] != self.channels:
            raise ValueError(f"audio must be [B, {self.channels}, samples], got {tuple(audio.shape)}")
        if not self.encoder:
            raise ValueError("this codec config has no encoder stages")
        nq = num_quantizers or self.num_quantizers
        if not 1 <= nq <= self.num_quantizers:
            raise ValueError(f"num_quantizers must be in [1, {self.num_quantizers}]")
        b, c, n = audio.shape
        lengths = torch.full((b,), n, dtype=torch.long) if lengths is None else lengths.to(torch.long).cpu()
        hop = self.cfg.downsample_rate
        x = F.pad(audio.float(), (0, (-n) % hop))
        if self.cfg.interleave and c > 1:
            x = x.transpose(1, 2).reshape(b, 1, -1)
            lengths = lengths * c
        x = x.to(_stage_dtype(self.encoder))
        for stage in self.encoder:
            x = stage(x)
            if isinstance(stage, PatchStage):
                lengths = lengths // stage.patch_size
        codes = self.quantizer.encode(x, lengths.to(x.device), nq)
        return codes, lengths

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [nq, B, T] (any nq up to num_quantizers) -> float32 audio [B, channels, T * downsample_rate]."""
        if codes.dim() != 3:
            raise ValueError(f"codes must be [nq, B, T], got shape {tuple(codes.shape)}")
        if not 1 <= codes.shape[0] <= self.num_quantizers:
            raise ValueError(f"codes has {codes.shape[0]} quantizers; this codec has {self.num_quantizers}")
        size = self.cfg.quantizer.codebook_size
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= size):
            raise ValueError(f"codes must lie in [0, {size})")
        return self._decode(codes, None)

    def _decode(self, codes: torch.Tensor, states: list[list[LayerState]] | None) -> torch.Tensor:
        tiles = self.tiles
        x = self.quantizer.decode(codes.to(self.quantizer.quantizers[0].codebook.weight.device), tiles)
        x = x.to(_stage_dtype(self.decoder))
        for i, stage in enumerate(self.decoder):
            if isinstance(stage, TransformerStage):
                x = stage(x, None if states is None else states[i], tiles)
            else:
                x = stage(x)
        b = x.shape[0]
        if self.cfg.interleave and self.cfg.channels > 1:
            # One interleaved stream L0 R0 L1 R1 ... -> [B, channels, samples].
            x = x.reshape(b, -1, self.cfg.channels).transpose(1, 2).contiguous()
        return x.float()

    def stream(self, batch: int = 1) -> "CodecStream":
        """An incremental decoder: feed it consecutive chunks of codes, get each chunk's audio."""
        return CodecStream(self, batch)


class CodecStream:
    """Chunk-by-chunk decoding that keeps each attention layer's last context-1 keys/values.

    With the codec built with fixed tiles (`AudioCodec.tiles`), the audio of every chunk is
    bitwise the matching slice of a whole-sequence decode, whatever the chunk sizes."""

    def __init__(self, codec: AudioCodec, batch: int) -> None:
        self.codec = codec
        self.batch = batch
        self.states = [
            [LayerState() for _ in stage.transformer.layers] if isinstance(stage, TransformerStage) else []
            for stage in codec.decoder
        ]
        self.frames = 0

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [nq, B, n] (the next n frames) -> audio [B, channels, n * downsample_rate]."""
        if codes.dim() != 3 or codes.shape[1] != self.batch:
            raise ValueError(f"codes must be [nq, {self.batch}, n], got {tuple(codes.shape)}")
        if codes.shape[-1] == 0:
            return torch.zeros(self.batch, self.codec.channels, 0)
        self.frames += codes.shape[-1]
        return self.codec._decode(codes, self.states)


def _stage_dtype(stages: nn.ModuleList) -> torch.dtype:
    for p in stages.parameters():
        return p.dtype
    return torch.float32


_V1_RENAMES = [
    (re.compile(r"\.self_attn\.in_projs\.0\."), ".self_attn.in_proj."),
    (re.compile(r"\.self_attn\.out_projs\.0\."), ".self_attn.out_proj."),
    (re.compile(r"\.self_attn\.in_proj_weight$"), ".self_attn.in_proj.weight"),
    (re.compile(r"\.linear1\."), ".ffn.0."),
    (re.compile(r"\.linear2\."), ".ffn.2."),
    (re.compile(r"\.weight_g$"), ".parametrizations.weight.original0"),
    (re.compile(r"\.weight_v$"), ".parametrizations.weight.original1"),
]


def canonical_codec_key(key: str) -> str:
    """Map v1 / legacy state-dict names onto the names this module uses."""
    for pattern, replacement in _V1_RENAMES:
        key = pattern.sub(replacement, key)
    return key


def adapt_projections(codec: AudioCodec, keys: set[str]) -> None:
    """v2 checkpoints store input/output projections even where the dimensions already match
    (v1 omits them). Give such stages a Linear so the stored weights load."""
    for prefix, stages in (("encoder", codec.encoder), ("decoder", codec.decoder)):
        for i, stage in enumerate(stages):
            if not isinstance(stage, TransformerStage):
                continue
            d = stage.stage.d_model
            if isinstance(stage.input_proj, nn.Identity) and f"{prefix}.{i}.input_proj.weight" in keys:
                stage.input_proj = nn.Linear(d, d, bias=False)
            if isinstance(stage.output_proj, nn.Identity) and f"{prefix}.{i}.output_proj.weight" in keys:
                stage.output_proj = nn.Linear(d, d, bias=False)
