"""What one audit is asked to do, wherever it runs: the local engine (`synth`), its Ray workers, or a
live server (`server`). Plain values; nothing is loaded or sent here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import MossError
from ..measures import LEVELS, check_level, check_speech
from ..measures.speech import SpeechThresholds
from ..measures.words import WordOptions
from ..pipeline.options import SynthOptions
from .scenarios import SCENARIOS, server_scenarios

if TYPE_CHECKING:
    from ..engine.requests import LogitsHook
    from ..remote.client import Retry
    from ..remote.settings import ServerOptions


@dataclass
class AuditOptions:
    """One audit, wherever it runs: the local engine (`synth`), or a live server (`server`)."""

    requests: Path | None = None
    scenarios: tuple[str, ...] | None = None  # None: every scenario the executor can compose
    level: str = "codes"
    min_snr_db: float = 60.0
    speech: SpeechThresholds = field(default_factory=SpeechThresholds)  # --level speech: what the same speech is
    words: WordOptions | None = None  # --level speech with --asr-model: the words are heard too
    strict_unseeded: bool = False
    allow_unseeded: bool = False  # an unseeded request that differs alone-vs-alone is a warning, not a failure
    command: str | None = None  # the command line that asked for this audit, as the reports show it
    # The local engine (and its Ray workers). With a server, `synth.deploy` names the deploy file
    # the server runs (its stage-0 seed is checked) and nothing else of it applies.
    synth: SynthOptions = field(default_factory=SynthOptions)
    max_batch: int | None = None
    perturb: LogitsHook | None = None  # test hook: may change logits (e.g. of batched rows only)
    # A live speech server instead.
    server: ServerOptions | None = None
    stagger_s: float | None = None  # None: a quarter of a request's time alone (measured by the reference run)
    allow_dropped_fields: bool = False  # send fields vllm-omni drops (a warning instead of exit 2)
    on_retry: Callable[[Retry], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # A request sent longer than the timeout after another overlaps nothing of it (that one has
        # finished or failed by then): such a stagger would only make the audit wait.
        if self.server is not None and self.stagger_s is not None and not 0 <= self.stagger_s <= self.server.timeout_s:
            raise MossError(
                f"must be from 0 to --timeout ({self.server.timeout_s * 1000:g} ms), got {self.stagger_s * 1000:g}: "
                "a request sent later than that after another overlaps nothing of it",
                field="--stagger-ms",
            )

    def chosen(self) -> tuple[str, ...]:
        """The scenarios to run, checked (with the other options); the repeat first, since every
        verdict rests on it."""
        known = server_scenarios() if self.server is not None else SCENARIOS
        check_speech(check_level(self.level, LEVELS), self.words)
        if self.allow_unseeded and self.strict_unseeded:
            raise MossError(
                "--allow-unseeded accepts unseeded requests that vary and --strict-unseeded fails them: give one",
                field="--allow-unseeded",
            )
        chosen = self.scenarios if self.scenarios is not None else known
        unknown = [s for s in chosen if s not in known]
        if unknown:
            kind = " for a server audit" if self.server is not None else ""
            raise MossError(
                f"unknown scenario(s) {', '.join(unknown)}{kind}; choose from {', '.join(known)}", field="--scenarios"
            )
        first = ("repeat",) if self.server is not None or "repeat" in chosen else ()
        return (*first, *dict.fromkeys(s for s in chosen if s != "repeat"))
