"""Reference voices: read once per file, encoded once per content, and placed in the prompt as a
voice to clone or, with a transcript (`ref_text`), as audio the talker continues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..config.requests import Request
from ..io.reference_audio import Reference, read_reference
from .models import Models


class Voices:
    def __init__(self, models: Models) -> None:
        self.models = models
        self._read: dict[Path, Reference] = {}
        self._codes: dict[str, torch.Tensor] = {}  # by file content hash: identical files encode once

    def reference(self, path: Path) -> Reference:
        """A reference voice at the codec's rate and channels (read once per path)."""
        key = path.resolve()
        if key not in self._read:
            codec = self.models.codec_config
            self._read[key] = read_reference(key, codec.channels, codec.sampling_rate)
        return self._read[key]

    def codes(self, reference: Reference) -> torch.Tensor:
        """[frames, n_vq] codes of a reference voice."""
        if reference.sha256 not in self._codes:
            m = self.models
            codes, lengths = m.codec.encode(reference.audio()[None].to(m.device), m.talker_config.n_vq)
            self._codes[reference.sha256] = codes[:, 0, : int(lengths[0])].T.cpu()
        return self._codes[reference.sha256]

    def forget(self, reference: Reference) -> None:
        """Drop what is cached for a reference (a server's voices come and go; a job keeps its own)."""
        self._read.pop(reference.path, None)
        self._codes.pop(reference.sha256, None)

    def frames(self, reference: Reference) -> int:
        return reference.samples // self.models.codec_config.downsample_rate

    @staticmethod
    def prompt_arguments(request: Request, voice: Any) -> tuple[str, dict]:
        """The text and keywords for `PromptBuilder.build` (`voice`: the reference's codes) or
        `PromptBuilder.length` (`voice`: its frame count); `voice` None: no reference."""
        if voice is None:
            return request.text, dict(request.prompt_fields)
        if request.ref_text is not None:  # continuation: transcript + text, the voice as prefix audio
            return request.ref_text + request.text, {"continuation": voice, **request.prompt_fields}
        return request.text, {"references": [voice], **request.prompt_fields}

    def prompt_length(self, request: Request, reference: Reference | None) -> int:
        voice = None if reference is None else self.frames(reference)
        text, arguments = self.prompt_arguments(request, voice)
        return self.models.prompts.length(text, **arguments)

    def prompt(self, request: Request, reference: Reference | None) -> torch.Tensor:
        voice = None if reference is None else self.codes(reference)
        text, arguments = self.prompt_arguments(request, voice)
        return self.models.prompts.build(text, **arguments)
