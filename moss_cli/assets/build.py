"""Generate the tiny talker and codec checkpoints in the release layout.

    python -m moss_cli.assets.build [OUT_DIR]     (default: next to this file)

Every tensor is drawn from a generator seeded by a hash of its name, and those derived from dot
products are computed in float64 with exact sums, so the files are byte-identical on every run and
every x86-64 CPU with AVX2 or later (torch's float32 normal sampler has another kernel without it).

The weights are random but shaped so the output behaves like speech synthesis: the stop head ends
an utterance after about 20 frames (1.6 s) on average, the audio heads give peaked, non-degenerate
code distributions, and the prompt matters: another text, instruction or reference voice gives
other codes, as it would with a trained model.

Plain random initialisation does not give the last point. The prompt is ~200 rows, mostly the
fixed template, and the talker continues from the same `<|audio_start|>` row every time. With
unit-scale query/key norms the backbone's attention is nearly uniform over those rows, and its
output is small next to the row's own embedding, so the last hidden state is that of
`<|audio_start|>` whatever the text (cosine similarity 0.99 between texts). Hence the talker's
attention is sharpened and amplified (ATTENTION_SHARPNESS, ATTENTION_GAIN): each head reads a few
rows, chosen by content and relative position, and what it reads dominates the residual. And the
stop margin, an ln_f bias, is kept out of the (tied) audio heads: there it would add one fixed offset
to every frame's audio logits, so the same codes would win whatever the hidden state.

A trained model never ends an utterance before saying anything, but the stop margin alone does:
at frame 0 the hidden state's push against it reached P(stop) ~27% for long texts, so a seed could
give empty audio. Frame 0 is the only frame whose backbone input is the `<|audio_start|>` row
(later frames continue from `<|audio_assistant_slot|>` rows), so that token's embedding carries an
extra component along the stop head's "continue" direction (START_CONTINUE): it survives the
backbone's residual stream to the stop head and raises frame 0's margin alone, to P(stop) < 1%.
The audio heads are orthogonal to that direction, so it does not pick frame 0's codes: the prompt
still does.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..model.checkpoint import stored_layout
from ..model.codec import AudioCodec, adapt_projections
from ..model.config import CodecConfig, TalkerConfig
from ..model.talker import MossTTSLocal
from . import ASSETS

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_user_slot|>",
    "<|audio_assistant_slot|>",
]
STOP_MARGIN = 3.7  # logit(continue) - logit(stop) from the ln_f bias ...
STOP_HEAD_STD = 0.15  # ... plus the hidden state's push (std ~1.7): P(stop) ~ 5% per frame, varying with the prompt
ATTENTION_SHARPNESS = 6.0  # q_norm * k_norm gain: attention logits ~N(0, 6^2) instead of ~N(0, 1)
ATTENTION_GAIN = 4.0  # o_proj scale: what a row reads outweighs its own embedding
# Norm of the "continue" component added to the <|audio_start|> embedding (the other rows have norm
# ~8): frame 0's margin rises from ~3 to ~8 logits on average, at least ~6, so P(stop) < 0.5% there.
START_CONTINUE = 24.0


def byte_alphabet() -> list[str]:
    """The 256 printable characters byte-level BPE uses for the bytes 0..255 (GPT-2's mapping)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_json() -> dict:
    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    added = []
    for offset, token in enumerate(SPECIAL_TOKENS):
        vocab[token] = 256 + offset
        added.append(
            {
                "id": 256 + offset,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },
    }


@dataclass(frozen=True)
class TalkerSizes:
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    local_heads: int = 4
    local_ffn: int = 128
    n_vq: int = 6
    codebook: int = 128


@dataclass(frozen=True)
class CodecSizes:
    d_model: int = 32
    heads: int = 2
    layers: int = 1
    code_dim: int = 32
    rvq_dim: int = 16
    quantizers: int = 8
    codebook: int = 128
    codebook_dim: int = 4


def talker_config(z: TalkerSizes = TalkerSizes()) -> dict:
    qwen = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 272,
        "hidden_size": z.hidden,
        "intermediate_size": z.ffn,
        "num_hidden_layers": z.layers,
        "num_attention_heads": z.heads,
        "num_key_value_heads": z.kv_heads,
        "head_dim": z.hidden // z.heads,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "initializer_range": 0.02,
        "pad_token_id": 256,
    }
    gpt2 = {
        "model_type": "gpt2",
        "vocab_size": 272,
        "n_embd": z.hidden,
        "n_layer": 1,
        "n_head": z.local_heads,
        "n_inner": z.local_ffn,
        "n_positions": z.n_vq + 1,
        "n_ctx": z.n_vq + 1,
        "activation_function": "silu",
        "layer_norm_epsilon": 1e-6,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "position_embedding_type": "rope",
        "rope_base": 10000.0,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "initializer_range": 0.02,
    }
    n_vq, codebook = z.n_vq, z.codebook
    return {
        "architectures": ["MossTTSLocalModel"],
        "model_type": "moss_tts_local",
        "dtype": "float32",
        "transformers_version": "4.57.1",
        "qwen3_config": qwen,
        "language_config": qwen,
        "gpt2_config": gpt2,
        "n_vq": n_vq,
        "audio_vocab_size": codebook,
        "audio_codebook_sizes": [codebook] * n_vq,
        "audio_pad_token_id": codebook,
        "audio_pad_code": codebook,
        "pad_token_id": 256,
        "im_start_token_id": 257,
        "im_end_token_id": 258,
        "audio_start_token_id": 259,
        "audio_end_token_id": 260,
        "audio_user_slot_token_id": 261,
        "audio_assistant_slot_token_id": 262,
        "audio_assistant_gen_slot_token_id": 262,
        "sampling_rate": 48000,
        "attn_implementation": "sdpa",
        "local_text_head_mode": "binary",
        "tie_word_embeddings": True,
        "initializer_range": 0.02,
    }


def _transformer(inp: int, out: int, context: float, z: CodecSizes) -> dict:
    return {
        "module_type": "Transformer",
        "input_dimension": inp,
        "output_dimension": out,
        "d_model": z.d_model,
        "num_heads": z.heads,
        "num_layers": z.layers,
        "dim_feedforward": 2 * z.d_model,
        "causal": True,
        "norm": "layer_norm",
        "positional_embedding": "rope",
        "max_period": 10000,
        "gating": "none",
        "layer_scale": 0.01,
        "conv_layout": True,
        "context_duration": context,
    }


def codec_config(z: CodecSizes = CodecSizes()) -> dict:
    """v2 layout: 48 kHz stereo interleaved, hop 3840, six transformer stages each way."""
    patch2 = {"module_type": "PatchedPretransform", "patch_size": 2}
    patch240 = {"module_type": "PatchedPretransform", "patch_size": 240}
    d, half, code = z.d_model, z.d_model // 2, z.code_dim
    encoder = [
        patch240,
        _transformer(240, half, 1.0, z),
        patch2,
        _transformer(d, half, 2.0, z),
        patch2,
        _transformer(d, half, 4.0, z),
        patch2,
        _transformer(d, half, 8.0, z),
        patch2,
        _transformer(d, code, 10.0, z),
        patch2,
        _transformer(2 * code, code, 10.0, z),
    ]
    decoder = [
        _transformer(code, 2 * d, 10.0, z),
        patch2,
        _transformer(d, 2 * d, 10.0, z),
        patch2,
        _transformer(d, 2 * d, 8.0, z),
        patch2,
        _transformer(d, 2 * d, 4.0, z),
        patch2,
        _transformer(d, 2 * d, 2.0, z),
        patch2,
        _transformer(d, 240, 1.0, z),
        patch240,
    ]
    return {
        "architectures": ["MossAudioTokenizerModel"],
        "model_type": "moss-audio-tokenizer",
        "version": "tiny-v2",
        "sampling_rate": 48000,
        "downsample_rate": 3840,
        "number_channels": 2,
        "enable_channel_interleave": True,
        "causal_transformer_context_duration": 10.0,
        "code_dim": code,
        "attention_implementation": "sdpa",
        "compute_dtype": "fp32",
        "quantizer_type": "rlfq",
        "quantizer_kwargs": {
            "input_dim": code,
            "rvq_dim": z.rvq_dim,
            "output_dim": code,
            "num_quantizers": z.quantizers,
            "codebook_size": z.codebook,
            "codebook_dim": z.codebook_dim,
            "quantizer_type": "rlfq",
        },
        "encoder_kwargs": encoder,
        "decoder_kwargs": decoder,
        "dtype": "float32",
    }


def _randn(name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") & (2**63 - 1)
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float32) * std


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    """The dot product of two float64 vectors, its products summed exactly (the same on any CPU)."""
    return math.fsum((a * b).tolist())


def _fill(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A plausible initial value for a tensor, chosen by its role in the name."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias":
        return _randn(name, shape, 0.02)
    if leaf == "scale":  # codec layer scale
        return torch.full(shape, 0.01)
    if len(shape) == 1:  # norm weights
        return 1.0 + _randn(name, shape, 0.05)
    if leaf == "original0":  # weight-norm gain
        return 1.0 + _randn(name, shape, 0.1).abs()
    fan_in = shape[1] if len(shape) > 1 else shape[0]
    return _randn(name, shape, fan_in**-0.5)


def talker_tensors(cfg: TalkerConfig, stop_margin: float = STOP_MARGIN) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        model = MossTTSLocal(cfg)
    tensors = {name: _fill(name, shape) for name, (_, _, shape) in stored_layout(model).items()}
    tensors["transformer.embed_tokens.weight"] = _randn(
        "transformer.embed_tokens.weight", tuple(tensors["transformer.embed_tokens.weight"].shape), 1.0
    )
    for name in tensors:
        if name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
            tensors[name] = tensors[name] * ATTENTION_SHARPNESS**0.5  # the logit scales with both
        elif name.endswith("self_attn.o_proj.weight"):
            tensors[name] = tensors[name] * ATTENTION_GAIN
    head = _randn("local_text_lm_head.weight", (2, cfg.hidden_size), STOP_HEAD_STD)
    tensors["local_text_lm_head.weight"] = head
    # The tensors derived below are computed in float64 with exactly summed dot products, then
    # rounded once: a float32 BLAS dot product sums in an order that depends on the CPU.
    direction = (head[0] - head[1]).double()
    # Shift ln_f's bias along (continue - stop) so that continuing is STOP_MARGIN logits likelier.
    tensors["local_transformer.ln_f.bias"] = (direction * (stop_margin / _dot(direction, direction))).float()
    # The audio heads are tied to the audio embeddings: without this projection the shift above
    # adds the same offset to every frame's audio logits, and one code wins whatever the prompt.
    unit = direction / math.sqrt(_dot(direction, direction))
    for k in range(cfg.n_vq):
        key = f"audio_embeddings.{k}.weight"
        table = _randn(key, tuple(tensors[key].shape), 0.5).double()
        along = torch.tensor([_dot(row, unit) for row in table], dtype=torch.float64)
        tensors[key] = (table - along[:, None] * unit).float()
    # Frame 0 continues from the <|audio_start|> row: give its embedding the direction that, through
    # the backbone's final RMSNorm and ln_f (which drops the mean), reads as "continue" to the head.
    continue_dir = direction * tensors["local_transformer.ln_f.weight"].double()
    mean = math.fsum(continue_dir.tolist()) / len(continue_dir)
    continue_dir = (continue_dir - mean) / tensors["transformer.norm.weight"].double()
    embed = tensors["transformer.embed_tokens.weight"]
    start = cfg.audio_start_token_id
    push = START_CONTINUE * continue_dir / math.sqrt(_dot(continue_dir, continue_dir))
    embed[start] = (embed[start].double() + push).float()
    return tensors


def codec_tensors(cfg: CodecConfig) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        codec = AudioCodec(cfg)
        everything = {
            f"{part}.{i}.{proj}.weight"
            for part in ("encoder", "decoder")
            for i in range(12)
            for proj in ("input_proj", "output_proj")
        }
        adapt_projections(codec, everything)  # v2 stores every projection, even square ones
    tensors = {name: _fill(name, tuple(t.shape)) for name, t in codec.state_dict().items()}
    for name, t in tensors.items():
        if name.endswith("codebook.weight"):
            tensors[name] = _randn(name, tuple(t.shape), 1.0)
    last = f"decoder.{len(cfg.decoder) - 2}.output_proj.weight"
    tensors[last] = tensors[last] * 0.02  # keep the waveform well inside [-1, 1]
    return tensors


def _write(directory: Path, config: dict, tensors: dict[str, torch.Tensor], extra: dict[str, dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_file(
        {k: v.contiguous() for k, v in sorted(tensors.items())},
        str(directory / "model.safetensors"),
        metadata={"format": "pt"},
    )
    for filename, content in extra.items():
        (directory / filename).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build(
    out: Path = ASSETS,
    talker: TalkerSizes = TalkerSizes(),
    codec: CodecSizes = CodecSizes(),
    stop_margin: float = STOP_MARGIN,
    names: tuple[str, str] = ("tiny-talker", "tiny-codec"),
) -> tuple[Path, Path]:
    """Write a talker and a codec checkpoint (the shipped tiny ones by default)."""
    talker_dir, codec_dir = out / names[0], out / names[1]
    tcfg = talker_config(talker)
    _write(
        talker_dir,
        tcfg,
        talker_tensors(TalkerConfig.from_dict(tcfg), stop_margin),
        {
            "tokenizer.json": tokenizer_json(),
            "tokenizer_config.json": {
                "tokenizer_class": "Qwen2TokenizerFast",
                "model_max_length": 4096,
                "pad_token": "<|endoftext|>",
                "eos_token": "<|im_end|>",
            },
        },
    )
    ccfg = codec_config(codec)
    _write(codec_dir, ccfg, codec_tensors(CodecConfig.from_dict(ccfg)), {})
    return talker_dir, codec_dir


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ASSETS
    for path in build(target):
        print(path)
