"""The built-in audit set, used when no request file is given: short and long, seeded and
unseeded, an explicit seed 0, and repeated identical texts."""

from __future__ import annotations

from .requests import Request

_TEXTS = [
    ("short-unseeded", "Yes.", None, 10),
    ("long-unseeded", "A longer sentence, so that this request is still running when its neighbours finish.", None, 48),
    ("seed-0", "Explicit seed zero must count as a seed.", 0, 24),
    ("seed-1234", "An explicitly seeded request.", 1234, 24),
    ("twin-a", "The same text twice in one batch.", None, 20),
    ("twin-b", "The same text twice in one batch.", None, 20),
    ("instructed", "Read this calmly.", None, 16),
    ("medium-seeded", "Medium length, with its own seed and sampling overrides.", 77, 32),
]


def builtin_requests(for_server: bool = False) -> list[Request]:
    """`for_server`: without the fields a vllm-omni MOSS-TTS-Local server drops (an instruction,
    audio sampling overrides), so the default server audit sends only what the server honours."""
    requests = []
    for line, (rid, text, seed, frames) in enumerate(_TEXTS, start=1):
        fields = {"instruction": "Calm and slow."} if rid == "instructed" and not for_server else {}
        sampling = {"audio_temperature": 1.2, "audio_top_k": 30} if rid == "medium-seeded" and not for_server else {}
        requests.append(
            Request(
                id=rid, text=text, line=line, seed=seed, max_new_frames=frames, prompt_fields=fields, sampling=sampling
            )
        )
    return requests
