"""The text of the reference's prompt template (the chat / <user_inst> layout) and its fields.
Plain strings, no tokenizer: request validation reads the field names without loading anything."""

from __future__ import annotations

from typing import Any

USER_PREFIX = "user\n"
REFERENCE_PREFIX = "<user_inst>\n- Reference(s):\n"
TEXT_HEADER = "\n- Text:\n"
USER_SUFFIX = "\n</user_inst>"
ASSISTANT_TURN = "\n"
ASSISTANT_PREFIX = "assistant\n"
PROMPT_FIELDS = ("instruction", "tokens", "quality", "sound_event", "ambient_sound", "language")
FIELD_TITLES = {
    "instruction": "Instruction",
    "tokens": "Tokens",
    "quality": "Quality",
    "sound_event": "Sound Event",
    "ambient_sound": "Ambient Sound",
    "language": "Language",
}


def field_text(value: Any) -> str:
    """An empty or missing field is written as the literal `None`."""
    if value is None:
        return "None"
    return str(value).strip() or "None"


def fields_block(fields: dict[str, Any]) -> str:
    """The part of the template between the references and the text."""
    block = "".join(f"\n- {FIELD_TITLES[name]}:\n{field_text(fields.get(name))}" for name in PROMPT_FIELDS)
    return block + TEXT_HEADER
