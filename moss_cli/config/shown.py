"""What `moss config show` shows of a resolved deploy config: stage 0's default sampling parameters,
max_num_seqs, max_model_len and the codec's streaming keys, each with its value, the file and line it
came from and what it drives in a vllm-omni MOSS-TTS-Local deployment and in moss (deploy.py's
STAGE0_DRIVES)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .deploy import DRIVES_NOTE, STAGE0_DRIVES
from .deploy_config import DeployConfig
from .deploy_merge import Source

SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "seed", "repetition_penalty")
HEADERS = ("key", "value", "from", "drives in vllm-omni", "drives in moss")


@dataclass(frozen=True)
class Shown:
    key: str
    value: Any
    source: Source
    vllm_omni: str  # what it drives there
    moss: str

    def cells(self) -> list[str]:
        """The table's row: plain text (escape it for Rich markup)."""
        return [
            self.key,
            "null" if self.value is None else str(self.value),
            str(self.source),
            self.vllm_omni,
            self.moss,
        ]


def shown(config: DeployConfig) -> list[Shown]:
    """Every value shown, in the table's order."""
    params = config.sampling
    values = [
        (f"default_sampling_params.{key}", params.get(key), ("stages", 0, "default_sampling_params", key))
        for key in SAMPLING
    ]
    values += [(key, config.stage(0).get(key), ("stages", 0, key)) for key in ("max_num_seqs", "max_model_len")]
    connector = config.codec_connector
    values += [
        (f"connectors.{connector}.extra.{key}", value, ("connectors", connector, "extra", key))
        for key, value in config.codec_stream.items()
    ]
    return [Shown(key, value, config.source(*where), *_drives(key)) for key, value, where in values]


def _drives(key: str) -> tuple[str, str]:
    if key.startswith("connectors."):
        return "the codec's streaming chunks", "the chunks of --stream"
    return STAGE0_DRIVES.get(key, ("", ""))


def title(config: DeployConfig, platform: str) -> str:
    return f"stage 0 of {config.path or 'built-in defaults'} (platform {platform})"


def as_dict(config: DeployConfig, platform: str) -> dict:
    """`moss config show --json`'s document."""
    return {
        "deploy": str(config.path) if config.path else None,
        "platform": platform,
        "note": DRIVES_NOTE,
        "values": {
            s.key: {"value": s.value, "source": str(s.source), "vllm_omni": s.vllm_omni, "moss": s.moss}
            for s in shown(config)
        },
    }
