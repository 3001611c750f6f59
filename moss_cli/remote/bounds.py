"""What one answer of a speech server may cost the client, from the request's frame budget: its bytes
and its time. A broken or hostile server (an endless stream, a 2 GB Content-Length sent a byte a
second, a 50 MB error message) then ends in a one-line error within the deadline, with the client's
memory bounded, instead of holding it forever.

MOSS-TTS's codec makes 12.5 frames per second of audio (DESIGN.md), and a request's `max_new_tokens`
counts those frames; without one the server's own default applies, vllm-omni's stage-0 `max_tokens`
(4096 in its deploy/moss_tts_local.yaml, recipes/moss_tts_local_v1.5.yaml:36). The byte bound allows
the widest audio a speech server sends (48 kHz stereo at 4 bytes a sample) twice over for the base64
and framing of an event stream: generous for audio, tiny beside what a runaway answer reaches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .settings import ServerOptions

FRAME_RATE = 12.5  # codec frames per second of audio
DEFAULT_FRAMES = 4096  # a request without max_new_tokens: vllm-omni's stage-0 max_tokens
SECONDS_PER_FRAME = 1.0  # the deadline's allowance per frame, past --timeout: a slow CPU server under load
MAX_BYTES_PER_FRAME = int(48_000 / FRAME_RATE) * 2 * 4  # 48 kHz, 2 channels, 4 bytes a sample
ENCODED = 2  # server-sent events: base64 (4/3) and each event's JSON around it
SLACK_BYTES = 1 << 20  # headers, a WAV header, JSON around batch items
ERROR_BYTES = 64 << 10  # what is read of an answer that is no audio (an error, a page): its words are at the top
SHOWN_CHARS = 300  # what is shown of a server's words in a message


@dataclass(frozen=True)
class AnswerBounds:
    """The most bytes and seconds an answer to a request of `frames` frames may take."""

    frames: int
    max_bytes: int
    deadline_s: float
    deadline_given: bool = False  # --deadline set it (else --timeout and the frames did)

    @classmethod
    def of(cls, bodies: list[dict[str, Any]], options: ServerOptions, *, encoded: bool = False) -> AnswerBounds:
        """For one call carrying `bodies` (one, or a batch call's items): their frames together, each
        body's `max_new_tokens` or the server's default; `encoded`: the audio comes as base64 in JSON
        (events, batch items). --deadline wins over the derived deadline, --timeout plus SECONDS_PER_FRAME
        for each frame."""
        frames = sum(_frames(body) for body in bodies)
        max_bytes = frames * MAX_BYTES_PER_FRAME * (ENCODED if encoded else 1) + SLACK_BYTES
        if options.deadline_s is not None:
            return cls(frames, max_bytes, options.deadline_s, deadline_given=True)
        return cls(frames, max_bytes, options.timeout_s + frames * SECONDS_PER_FRAME)

    def overdue(self) -> str:
        """The words for an answer that outlasted its deadline."""
        why = (
            "--deadline"
            if self.deadline_given
            else (f"--timeout and {self.frames} frames at a second each; --deadline sets it")
        )
        return f"the whole answer took longer than {self.deadline_s:g} s ({why})"

    def too_long(self, samples: int, rate: int) -> str | None:
        """Why audio of `samples` at `rate` is more than the request's frames make (a frame's worth and
        a quarter second of leeway), or None."""
        allowed_s = self.frames / FRAME_RATE
        if rate > 0 and samples / rate > allowed_s + 1 / FRAME_RATE + 0.25:
            return (
                f"{samples / rate:.2f} s of audio, more than the {self.frames} frames the request allows make "
                f"({allowed_s:.2f} s at {FRAME_RATE:g} frames/s)"
            )
        return None

    def too_many_bytes(self, size: int) -> str:
        return (
            f"more than {self.max_bytes} bytes ({size} so far), more than audio of the {self.frames} frames the "
            "request allows can take: the answer is not read further"
        )


def _frames(body: dict[str, Any]) -> int:
    value = body.get("max_new_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_FRAMES


def shown(words: str) -> str:
    """A server's words as a message shows them: at most SHOWN_CHARS characters, saying how many more."""
    words = words.strip()
    if len(words) <= SHOWN_CHARS:
        return words
    return f"{words[:SHOWN_CHARS]}... ({len(words) - SHOWN_CHARS} more characters)"
