"""Prompt rows for the talker: the chat / <user_inst> template, tokenised with the checkpoint's
tokenizer, as rows [text_id, c_0 .. c_{n_vq-1}] (audio part all pad on text rows).

Each template piece is tokenised on its own, exactly as the reference processor does, because
BPE merges across piece boundaries would change the ids.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .config import TalkerConfig
from .template import (
    ASSISTANT_PREFIX,
    ASSISTANT_TURN,
    PROMPT_FIELDS,
    REFERENCE_PREFIX,
    USER_PREFIX,
    USER_SUFFIX,
    field_text,
    fields_block,
)


def max_token_bytes(tokenizer) -> int:
    """The most bytes of UTF-8 text one token of `tokenizer` (a `tokenizers.Tokenizer`) can stand
    for, over its vocabulary and its added (special) tokens, which match in any text.

    So a text of B bytes needs at least ceil(B / max_token_bytes) tokens: a bound on a prompt's
    length that costs nothing, taken before tokenising a text that may be far too long. Count B on
    the normalized text (`tokenizer.normalizer`, NFC for Qwen), which may be shorter than the raw.
    """
    from tokenizers import decoders, pre_tokenizers

    # A byte-level BPE (GPT-2, Qwen) spells each byte of text as one printable character; any
    # other vocabulary is plain text, and its UTF-8 length is the bound.
    byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)
    alphabet = frozenset(pre_tokenizers.ByteLevel.alphabet()) if byte_level else frozenset()
    longest = 0
    for token in tokenizer.get_vocab(with_added_tokens=False):
        longest = max(longest, sum(1 if ch in alphabet else len(ch.encode("utf-8")) for ch in token))
    for added in tokenizer.get_added_tokens_decoder().values():
        longest = max(longest, len(added.content.encode("utf-8")))
    return longest


TEMPLATE_LENGTHS_KEPT = 1024  # distinct prompt-field values whose template length is remembered


class PromptBuilder:
    def __init__(self, tokenizer, cfg: TalkerConfig) -> None:
        self.tokenizer = tokenizer
        self.cfg = cfg
        self._template_lengths: dict[tuple, int] = {}  # prompt rows without text, per field values

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def text_rows(self, ids: Sequence[int]) -> torch.Tensor:
        rows = torch.full((len(ids), self.cfg.n_vq + 1), self.cfg.audio_pad_code, dtype=torch.long)
        if ids:
            rows[:, 0] = torch.tensor(list(ids), dtype=torch.long)
        return rows

    def audio_rows(self, codes: torch.Tensor, slot_id: int) -> torch.Tensor:
        if codes.dim() != 2 or codes.shape[1] != self.cfg.n_vq:
            raise ValueError(f"reference codes must be [frames, {self.cfg.n_vq}], got {tuple(codes.shape)}")
        rows = torch.full((codes.shape[0], self.cfg.n_vq + 1), self.cfg.audio_pad_code, dtype=torch.long)
        rows[:, 0] = slot_id
        rows[:, 1:] = codes.to(torch.long)
        return rows

    def length(self, text: str, *, references: Sequence[int] = (), continuation: int = 0, **fields: Any) -> int:
        """Rows of the prompt `build` would make, from token counts only: the same arguments as
        `build`, with frame counts in place of the reference and continuation codes."""
        rows = self._template_length(fields) + len(self.encode(text)) + continuation
        if references:  # each [audio_start, frames..., audio_end]; together they replace the "None"
            rows += sum(2 + frames for frames in references) - len(self.encode("None"))
        return rows

    def _template_length(self, fields: dict[str, Any]) -> int:
        key = tuple(sorted((k, field_text(v)) for k, v in fields.items()))
        if key not in self._template_lengths:
            if len(self._template_lengths) >= TEMPLATE_LENGTHS_KEPT:  # a server sees endless instructions
                del self._template_lengths[next(iter(self._template_lengths))]  # the oldest
            self._template_lengths[key] = self.build("", **fields).shape[0]
        return self._template_lengths[key]

    def build(
        self,
        text: str,
        *,
        references: Sequence[torch.Tensor] = (),
        continuation: torch.Tensor | None = None,
        **fields: Any,
    ) -> torch.Tensor:
        """Rows [T, 1 + n_vq] ending with the audio_start row the talker continues from.

        `fields` are instruction, tokens (duration hint), quality, sound_event, ambient_sound and
        language; `references` are code tensors [frames, n_vq] of reference voices (voice clone).
        `continuation` [frames, n_vq] is audio the talker continues from: it follows the
        audio_start row as assistant-slot rows (the caller puts its transcript before `text`).
        """
        rows = self._build(text, references, fields)
        if continuation is None:
            return rows
        return torch.cat([rows, self.audio_rows(continuation, self.cfg.audio_assistant_slot_token_id)])

    def _build(self, text: str, references: Sequence[torch.Tensor], fields: dict[str, Any]) -> torch.Tensor:
        unknown = set(fields) - set(PROMPT_FIELDS)
        if unknown:
            raise TypeError(f"unknown prompt field(s): {sorted(unknown)}")
        c = self.cfg
        head = [c.im_start_token_id] + self.encode(USER_PREFIX) + self.encode(REFERENCE_PREFIX)
        tail = (
            self.encode(fields_block(fields))
            + self.encode(text)
            + self.encode(USER_SUFFIX)
            + [c.im_end_token_id]
            + self.encode(ASSISTANT_TURN)
            + [c.im_start_token_id]
            + self.encode(ASSISTANT_PREFIX)
            + [c.audio_start_token_id]
        )
        if not references:
            return self.text_rows(head + self.encode("None") + tail)
        parts = [self.text_rows(head)]
        for codes in references:
            parts += [
                self.text_rows([c.audio_start_token_id]),
                self.audio_rows(codes, c.audio_user_slot_token_id),
                self.text_rows([c.audio_end_token_id]),
            ]
        parts.append(self.text_rows(tail))
        return torch.cat(parts)


def left_pad(prompts: Sequence[torch.Tensor], cfg: TalkerConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack prompts into a left-padded batch: (input_ids [B, T, 1 + n_vq], attention_mask [B, T])."""
    length = max(p.shape[0] for p in prompts)
    ids = torch.full((len(prompts), length, cfg.n_vq + 1), cfg.audio_pad_code, dtype=torch.long)
    ids[:, :, 0] = cfg.pad_token_id
    mask = torch.zeros(len(prompts), length, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, length - p.shape[0] :] = p
        mask[i, length - p.shape[0] :] = True
    return ids, mask
