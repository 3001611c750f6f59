"""A resolved deploy config: its stages, connectors and the file and line each value came from
(`load_deploy` in deploy.py resolves one; deploy_checks.py checks it)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .deploy_merge import Source

CODEC_STREAM_KEYS = (
    "codec_chunk_frames",
    "initial_codec_chunk_frames",
    "codec_chunk_ramp",
    "codec_left_context_frames",
)


@dataclass
class DeployConfig:
    """A resolved deploy config. `data` has `stages` keyed by stage_id; never mutate it in place."""

    path: Path | None
    platform: str
    data: dict
    sources: dict[tuple, Source] = field(default_factory=dict)

    def stage(self, stage_id: int) -> dict:
        return self.data.get("stages", {}).get(stage_id, {})

    def source(self, *path) -> Source:
        return self.sources.get(tuple(path), Source(None, None, "default"))

    @property
    def sampling(self) -> dict[str, Any]:
        """A copy of stage 0's default_sampling_params (the shared defaults stay untouched)."""
        return copy.deepcopy(self.stage(0).get("default_sampling_params", {}))

    @property
    def default_seed(self) -> int | None:
        return self.sampling.get("seed")

    @property
    def max_num_seqs(self) -> int | None:
        return self.stage(0).get("max_num_seqs")

    @property
    def max_model_len(self) -> int | None:
        return self.stage(0).get("max_model_len")

    @property
    def max_tokens(self) -> int | None:
        return self.sampling.get("max_tokens")

    @property
    def codec_connector(self) -> str | None:
        """Name of the first connector whose `extra` holds codec streaming keys."""
        for name, connector in (self.data.get("connectors") or {}).items():
            extra = connector.get("extra") if isinstance(connector, dict) else None
            if isinstance(extra, dict) and any(k in extra for k in CODEC_STREAM_KEYS):
                return name
        return None

    @property
    def codec_stream(self) -> dict[str, Any]:
        """The codec streaming keys (codec_chunk_frames, ...) of `codec_connector`."""
        name = self.codec_connector
        if name is None:
            return {}
        extra = self.data["connectors"][name]["extra"]
        return {k: copy.deepcopy(extra[k]) for k in CODEC_STREAM_KEYS if k in extra}
