"""What one request produced, wherever it ran: the local pipeline and Ray workers make it from a
run's result (`SynthResult.outcome`), the server job and the server audit from a speech server's
answer. The manifest writes its row from it and the audit compares two of them; fields a server
does not report are None."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .audio import codes_sha256


@dataclass
class Outcome:
    id: str
    pcm: np.ndarray  # int16 [samples, channels], what the file stores
    sample_rate: int
    pcm_sha256: str
    seed_source: str  # a config.effective.SeedSource, or what a server's header says
    seed: int | None = None
    text: str = ""
    frames: int | None = None
    codes: torch.Tensor | None = None  # [frames, n_vq]; None: not seen (a server sends audio, not codes)
    codes_hash: str | None = None  # without codes: the hash a server reported (x-moss-codes-sha256)
    audio: torch.Tensor | None = None  # float [channels, samples] the PCM came from; None: read from the PCM
    batch_size_seen: int | None = None
    wall_s: float = 0.0
    stop_reason: str | None = None  # stop | max_frames | empty | cancelled
    sampling: dict = field(default_factory=dict)  # the audio sampler's values (audio_temperature, ...)
    prompt_tokens: int | None = None
    ttfa_s: float | None = None  # streaming: time to first audio
    chunks: list[int] | None = None  # streaming: the frames of each chunk decoded
    chunk_ms: list[float] | None = None  # streaming: each chunk's decode time
    content: dict = field(default_factory=dict)  # what shapes its codes (see audit.mixups.request_content)

    @property
    def codes_sha256(self) -> str | None:
        return codes_sha256(self.codes) if self.codes is not None else self.codes_hash

    @property
    def codes_key(self) -> str | bytes | None:
        """What identifies the codes: their bytes (shape included), a reported hash, or None."""
        if self.codes is None:
            return self.codes_hash
        return f"{tuple(self.codes.shape)}".encode() + self.codes.cpu().numpy().tobytes()

    @property
    def waveform(self) -> torch.Tensor:
        """float [channels, samples]: the decoded audio where known, else the PCM's exact float image."""
        if self.audio is not None:
            return self.audio
        return torch.from_numpy(np.ascontiguousarray(self.pcm.T, dtype=np.float32) / 32767.0)
