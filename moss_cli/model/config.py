"""Model configs read from a checkpoint's `config.json`.

The field names follow the files the reference releases write (Hugging Face style: a nested
`qwen3_config`/`language_config` and `gpt2_config` for the talker, `encoder_kwargs`/
`decoder_kwargs`/`quantizer_kwargs` for the codec). Keys written by other tools
(`architectures`, `transformers_version`, `auto_map`, `dtype`, ...) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..validation import is_integer, is_number


def _int(d: dict, key: str, where: str, default: Any = ..., *aliases: str) -> int:
    for k in (key, *aliases):
        if k in d and d[k] is not None:
            value = d[k]
            if not is_number(value) or int(value) != value:
                raise ConfigError(f"expected an integer, got {value!r}", file=where, field=k)
            return int(value)
    if default is ...:
        raise ConfigError(f"missing required key {key!r}", file=where, field=key)
    return default


def _float(d: dict, key: str, where: str, default: Any = ...) -> float:
    value = d.get(key)
    if value is None:
        if default is ...:
            raise ConfigError(f"missing required key {key!r}", file=where, field=key)
        return default
    if not is_number(value):
        raise ConfigError(f"expected a number, got {value!r}", file=where, field=key)
    return float(value)


@dataclass(frozen=True)
class BackboneConfig:
    """Qwen3 decoder sizes."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    hidden_act: str = "silu"
    max_position_embeddings: int = 40960

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "BackboneConfig":
        hidden = _int(d, "hidden_size", where)
        heads = _int(d, "num_attention_heads", where)
        rope_theta = d.get("rope_theta")
        for nested in ("rope_parameters", "rope_scaling"):
            if rope_theta is None and isinstance(d.get(nested), dict):
                rope_theta = d[nested].get("rope_theta")
        return cls(
            vocab_size=_int(d, "vocab_size", where),
            hidden_size=hidden,
            intermediate_size=_int(d, "intermediate_size", where),
            num_layers=_int(d, "num_hidden_layers", where),
            num_heads=heads,
            num_kv_heads=_int(d, "num_key_value_heads", where, heads),
            head_dim=_int(d, "head_dim", where, hidden // heads),
            rope_theta=float(rope_theta if rope_theta is not None else 1_000_000.0),
            rms_norm_eps=_float(d, "rms_norm_eps", where, 1e-6),
            attention_bias=bool(d.get("attention_bias", False)),
            hidden_act=str(d.get("hidden_act", "silu")),
            max_position_embeddings=_int(d, "max_position_embeddings", where, 40960),
        )


@dataclass(frozen=True)
class LocalConfig:
    """GPT-2 style depth transformer that decodes one frame's codebooks."""

    hidden_size: int
    num_layers: int
    num_heads: int
    inner_size: int
    layer_norm_eps: float = 1e-5
    activation: str = "gelu_new"
    rope_base: float = 10000.0
    position_embedding: str = "rope"
    max_positions: int = 13
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False

    @classmethod
    def from_dict(cls, d: dict, where: str, layers_override: int | None, n_positions: int) -> "LocalConfig":
        hidden = _int(d, "n_embd", where, 768, "hidden_size")
        position = str(d.get("position_embedding_type", "absolute")).lower()
        if position not in ("rope", "absolute"):
            raise ConfigError(
                f"unsupported position_embedding_type {position!r}",
                file=where,
                field="gpt2_config.position_embedding_type",
            )
        return cls(
            hidden_size=hidden,
            num_layers=layers_override
            if layers_override is not None
            else _int(d, "n_layer", where, 12, "num_hidden_layers"),
            num_heads=_int(d, "n_head", where, 12, "num_attention_heads"),
            inner_size=_int(d, "n_inner", where, 4 * hidden),
            layer_norm_eps=_float(d, "layer_norm_epsilon", where, 1e-5),
            activation=str(d.get("activation_function", "gelu_new")),
            rope_base=_float(d, "rope_base", where, 10000.0),
            position_embedding=position,
            max_positions=n_positions,
            scale_attn_weights=bool(d.get("scale_attn_weights", True)),
            scale_attn_by_inverse_layer_idx=bool(d.get("scale_attn_by_inverse_layer_idx", False)),
        )


@dataclass(frozen=True)
class TalkerConfig:
    """MOSS-TTS-Local (`model_type: moss_tts_local`) talker config."""

    backbone: BackboneConfig
    local: LocalConfig
    n_vq: int
    audio_codebook_sizes: tuple[int, ...]
    audio_vocab_size: int
    audio_pad_code: int
    pad_token_id: int
    im_start_token_id: int
    im_end_token_id: int
    audio_start_token_id: int
    audio_end_token_id: int
    audio_user_slot_token_id: int
    audio_assistant_slot_token_id: int
    sampling_rate: int
    local_text_head_mode: str = "binary"
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    @property
    def special_token_ids(self) -> dict[str, int]:
        return {
            "pad_token_id": self.pad_token_id,
            "im_start_token_id": self.im_start_token_id,
            "im_end_token_id": self.im_end_token_id,
            "audio_start_token_id": self.audio_start_token_id,
            "audio_end_token_id": self.audio_end_token_id,
            "audio_user_slot_token_id": self.audio_user_slot_token_id,
            "audio_assistant_slot_token_id": self.audio_assistant_slot_token_id,
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "config.json") -> "TalkerConfig":
        model_type = d.get("model_type")
        if model_type not in (None, "moss_tts_local"):
            raise ConfigError(
                f"model_type is {model_type!r}; this tool runs 'moss_tts_local' talkers", file=where, field="model_type"
            )
        qwen = d.get("qwen3_config") if d.get("qwen3_config") is not None else d.get("language_config")
        if not isinstance(qwen, dict):
            raise ConfigError(
                "missing the nested backbone config (qwen3_config or language_config)", file=where, field="qwen3_config"
            )
        backbone = BackboneConfig.from_dict(qwen, f"{where} (qwen3_config)")
        n_vq = _int(d, "n_vq", where, 12)
        if n_vq <= 0:
            raise ConfigError("n_vq must be positive", file=where, field="n_vq")
        gpt2 = d.get("gpt2_config")
        if not isinstance(gpt2, dict):
            raise ConfigError(
                "missing the nested local transformer config gpt2_config", file=where, field="gpt2_config"
            )
        layers_override = d.get("local_transformer_layers")
        local = LocalConfig.from_dict(
            gpt2, f"{where} (gpt2_config)", int(layers_override) if layers_override is not None else None, n_vq + 1
        )
        if local.hidden_size != backbone.hidden_size:
            raise ConfigError(
                f"gpt2_config.n_embd ({local.hidden_size}) must equal the backbone hidden_size "
                f"({backbone.hidden_size}): audio embeddings and heads are shared",
                file=where,
                field="gpt2_config.n_embd",
            )
        if local.hidden_size % local.num_heads:
            raise ConfigError("gpt2_config.n_embd must be divisible by n_head", file=where, field="gpt2_config.n_head")
        sizes, audio_vocab, pad_code = _codebooks(d, where, n_vq)
        slot = d.get("audio_assistant_gen_slot_token_id")
        if slot is None:
            slot = _int(d, "audio_assistant_slot_token_id", where, 151656)
        cfg = cls(
            backbone=backbone,
            local=local,
            n_vq=n_vq,
            audio_codebook_sizes=sizes,
            audio_vocab_size=audio_vocab,
            audio_pad_code=pad_code,
            **{name: _int(d, name, where, default) for name, default in TOKEN_DEFAULTS.items()},
            audio_assistant_slot_token_id=int(slot),
            sampling_rate=_int(d, "sampling_rate", where, 48000),
            local_text_head_mode=_text_head_mode(d, where),
            raw=d,
        )
        for name, token_id in cfg.special_token_ids.items():
            if not 0 <= token_id < backbone.vocab_size:
                raise ConfigError(
                    f"{name} {token_id} is outside the text vocab (size {backbone.vocab_size})", file=where, field=name
                )
        return cfg


@dataclass(frozen=True)
class CodecStage:
    """One entry of `encoder_kwargs` / `decoder_kwargs`: a patch reshape or a causal transformer."""

    kind: str  # "patch" | "transformer"
    patch_size: int = 1
    input_dimension: int = 0
    output_dimension: int = 0
    d_model: int = 0
    num_heads: int = 1
    num_layers: int = 0
    dim_feedforward: int = 0
    layer_scale: float | None = None
    max_period: float = 10000.0
    norm: str = "layer_norm"
    positional_embedding: str = "rope"
    causal: bool = True
    context_duration: float | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str) -> "CodecStage":
        if not isinstance(d, dict):
            raise ConfigError("each stage must be an object", file=where)
        module_type = d.get("module_type")
        if module_type == "PatchedPretransform":
            size = _int(d, "patch_size", where)
            if size <= 0:
                raise ConfigError("patch_size must be positive", file=where, field="patch_size")
            return cls(kind="patch", patch_size=size)
        if module_type != "Transformer":
            raise ConfigError(
                f"unknown module_type {module_type!r}; expected Transformer or PatchedPretransform",
                file=where,
                field="module_type",
            )
        gating = d.get("gating", "none")
        if gating != "none":
            raise ConfigError(
                f"gating {gating!r} is not supported (the released codecs use 'none')", file=where, field="gating"
            )
        norm = str(d.get("norm", "layer_norm"))
        if norm != "layer_norm":
            raise ConfigError(
                f"norm {norm!r} is not supported (the released codecs use 'layer_norm')", file=where, field="norm"
            )
        positional = str(d.get("positional_embedding", "sin"))
        if positional not in ("rope", "none"):
            raise ConfigError(
                f"positional_embedding {positional!r} is not supported; expected rope or none",
                file=where,
                field="positional_embedding",
            )
        stage = cls(
            kind="transformer",
            input_dimension=_int(d, "input_dimension", where),
            output_dimension=_int(d, "output_dimension", where),
            d_model=_int(d, "d_model", where),
            num_heads=_int(d, "num_heads", where),
            num_layers=_int(d, "num_layers", where),
            dim_feedforward=_int(d, "dim_feedforward", where, 2048),
            layer_scale=None if d.get("layer_scale") is None else _float(d, "layer_scale", where),
            max_period=_float(d, "max_period", where, 10000.0),
            norm=norm,
            positional_embedding=positional,
            causal=bool(d.get("causal", False)),
            context_duration=None if d.get("context_duration") is None else _float(d, "context_duration", where),
        )
        if stage.d_model % stage.num_heads:
            raise ConfigError("d_model must be divisible by num_heads", file=where, field="num_heads")
        return stage


@dataclass(frozen=True)
class QuantizerConfig:
    kind: str  # "rlfq" (L2-normalised lookup) or "rvq"
    input_dim: int
    rvq_dim: int
    output_dim: int
    num_quantizers: int
    codebook_size: int
    codebook_dim: int


@dataclass(frozen=True)
class CodecConfig:
    """MOSS-Audio-Tokenizer config (v1: 24 kHz mono; v2: 48 kHz, channels interleaved)."""

    sampling_rate: int
    downsample_rate: int
    channels: int
    interleave: bool
    context_duration: float
    encoder: tuple[CodecStage, ...]
    decoder: tuple[CodecStage, ...]
    quantizer: QuantizerConfig
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def frame_rate(self) -> float:
        return self.sampling_rate / self.downsample_rate

    @classmethod
    def from_dict(cls, d: dict, where: str = "config.json") -> "CodecConfig":
        sampling_rate = _int(d, "sampling_rate", where, ..., "sample_rate")
        downsample = _int(d, "downsample_rate", where)
        channels = _int(d, "number_channels", where, 1, "channels_numbers")
        if channels not in (1, 2):
            raise ConfigError(f"number_channels must be 1 or 2, got {channels}", file=where, field="number_channels")
        q = d.get("quantizer_kwargs")
        if not isinstance(q, dict):
            raise ConfigError("missing quantizer_kwargs", file=where, field="quantizer_kwargs")
        kind = str(q.get("quantizer_type", d.get("quantizer_type", "rvq")))
        if kind not in ("rlfq", "random_prefix_rlfq", "rvq", "spec_rvq"):
            raise ConfigError(f"unsupported quantizer_type {kind!r}", file=where, field="quantizer_type")
        qwhere = f"{where} (quantizer_kwargs)"
        input_dim = _int(q, "input_dim", qwhere, 1024)
        rvq_dim = _int(q, "rvq_dim", qwhere, 0) or input_dim
        quantizer = QuantizerConfig(
            kind="rlfq" if "rlfq" in kind else "rvq",
            input_dim=input_dim,
            rvq_dim=rvq_dim,
            output_dim=_int(q, "output_dim", qwhere, 0) or input_dim,
            num_quantizers=_int(q, "num_quantizers", qwhere, 32),
            codebook_size=_int(q, "codebook_size", qwhere, 1024),
            codebook_dim=_int(q, "codebook_dim", qwhere, 8),
        )
        stages = {}
        for key in ("encoder_kwargs", "decoder_kwargs"):
            items = d.get(key) or []
            if not isinstance(items, list):
                raise ConfigError(f"{key} must be a list of stages", file=where, field=key)
            stages[key] = tuple(CodecStage.from_dict(s, f"{where} ({key}[{i}])") for i, s in enumerate(items))
        if not stages["decoder_kwargs"]:
            raise ConfigError("decoder_kwargs is empty: the codec cannot decode", file=where, field="decoder_kwargs")
        cfg = cls(
            sampling_rate=sampling_rate,
            downsample_rate=downsample,
            channels=channels,
            interleave=bool(d.get("enable_channel_interleave", channels > 1)),
            context_duration=_float(d, "causal_transformer_context_duration", where, 10.0),
            encoder=stages["encoder_kwargs"],
            decoder=stages["decoder_kwargs"],
            quantizer=quantizer,
            raw=d,
        )
        upsample = 1
        for stage in cfg.decoder:
            upsample *= stage.patch_size if stage.kind == "patch" else 1
        expected = downsample * (channels if cfg.interleave else 1)
        if upsample != expected:
            raise ConfigError(
                f"decoder patch sizes multiply to {upsample}, but downsample_rate x channels is {expected}",
                file=where,
                field="decoder_kwargs",
            )
        return cfg


# The special tokens' ids where a config leaves them out: the released checkpoints'.
TOKEN_DEFAULTS = {
    "pad_token_id": 151643,
    "im_start_token_id": 151644,
    "im_end_token_id": 151645,
    "audio_start_token_id": 151669,
    "audio_end_token_id": 151670,
    "audio_user_slot_token_id": 151654,
}


def _codebooks(d: dict, where: str, n_vq: int) -> tuple[tuple[int, ...], int, int]:
    """(each codebook's size, the audio vocab every head spans, the audio pad code outside it)."""
    audio_vocab = _int(d, "audio_vocab_size", where, 1024)
    sizes = d.get("audio_codebook_sizes")
    if sizes is None:
        sizes = [audio_vocab] * n_vq
    if not isinstance(sizes, list) or len(sizes) != n_vq or any(not is_integer(s) or s <= 0 for s in sizes):
        raise ConfigError(
            f"audio_codebook_sizes must be a list of {n_vq} positive integers", file=where, field="audio_codebook_sizes"
        )
    audio_vocab = max(audio_vocab, max(sizes))
    given = d.get("audio_pad_code") is not None or d.get("audio_pad_token_id") is not None
    pad_code = _int(d, "audio_pad_code", where, ..., "audio_pad_token_id") if given else 1024
    if pad_code < audio_vocab:
        raise ConfigError(
            f"audio_pad_code {pad_code} must lie outside the audio vocab (size {audio_vocab})",
            file=where,
            field="audio_pad_code",
        )
    return tuple(int(s) for s in sizes), audio_vocab, pad_code


def _text_head_mode(d: dict, where: str) -> str:
    """The local transformer's text head: absent means the release default ("binary"); an explicit
    null means full vocab, as in the reference config class."""
    mode = str(d.get("local_text_head_mode", "binary") or "full_vocab").strip().lower()
    mode = {"full": "full_vocab", "full-vocab": "full_vocab", "vocab": "full_vocab"}.get(mode, mode)
    if mode not in ("binary", "full_vocab"):
        raise ConfigError(
            "local_text_head_mode must be 'binary' or 'full_vocab'", file=where, field="local_text_head_mode"
        )
    return mode
