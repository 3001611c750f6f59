"""Golden baselines: each request's codes and PCM hashes alone, plus the environment that made them.

Fields added over time (the deploy file's hash, each request's effective seed) may be missing
from older golden files: a missing field is unknown, never a drift or a cause. A server audit's
baseline has a codes hash only where the server reports one (`moss serve` does, vllm-omni does
not): `codes_sha256` is then null, and drift is judged by the PCM alone. Either kind of baseline
can be checked by either kind of audit (a local baseline against a server, say): only the
environment fields both record are compared."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..config.effective import SeedSource
from ..errors import MossError
from ..io.atomic import write_text_atomic
from ..report.metrics import describe_change
from .runner import AuditResult

# Version 3: audio is sampled at vllm-omni's fixed MOSS-TTS-Local values whatever the deploy's stage 0
# says, so a deploy whose stage-0 values differed samples other codes; greedy codes are unchanged.
FORMAT = "moss-golden/3"
OLDER_FORMATS = {
    "moss-golden/1": "moss 0.1.0, whose sampler drew other codes from the same seed",
    "moss-golden/2": "an earlier moss that sampled audio with stage 0's sampling values, not vllm-omni's fixed ones",
}


def golden_document(result: AuditResult) -> dict:
    return {
        "format": FORMAT,
        "level": result.options.level,
        "environment": result.environment,
        "requests": {
            key: {
                "codes_sha256": out.codes_sha256,
                "pcm_sha256": out.pcm_sha256,
                "frames": out.frames,
                "seed_source": out.seed_source,
                "seed": out.seed,
            }
            for key, out in result.reference.items()
        },
    }


def save_golden(path: Path, result: AuditResult) -> None:
    write_text_atomic(path, json.dumps(golden_document(result), indent=2, sort_keys=True) + "\n")


@dataclass
class Drift:
    request: str
    reason: str  # "codes" | "pcm"
    detail: str
    cause: str | None = None  # known from the request itself, e.g. "seed 42 -> 7"


@dataclass
class GoldenCheck:
    path: Path
    drifts: list[Drift]
    environment_changes: dict[str, tuple]  # field -> (golden, now); only fields the golden file records
    unknown: list[str] = field(default_factory=list)  # environment fields the golden file does not record
    # Requests audited now that the baseline does not hold, and requests it holds that were not audited:
    # listed, never drift (nothing to compare; a new baseline takes them in).
    not_in_baseline: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.drifts

    @property
    def membership(self) -> list[str]:
        """What the baseline and this audit do not share, in words (empty when they hold the same requests)."""
        said = []
        if self.not_in_baseline:
            said.append(f"{len(self.not_in_baseline)} not in the baseline: {_some(self.not_in_baseline)}")
        if self.removed:
            said.append(f"{len(self.removed)} removed since the baseline: {_some(self.removed)}")
        return said

    @property
    def causes(self) -> list[str]:
        """What changed and can explain the drift: per-request seeds, then the environment."""
        seeds = [f"{d.request}: {d.cause}" for d in self.drifts if d.cause]
        return seeds + [describe_change(k, a, b) for k, (a, b) in self.environment_changes.items()]

    def describe(self) -> str:
        """One line: which requests drifted and why, as far as the golden file lets us tell, and
        which requests only one side holds."""
        return "; ".join([self._drift(), *self.membership])

    def _drift(self) -> str:
        if self.passed:
            return f"no drift from {self.path.name}"
        names = ", ".join(f"{d.request} ({d.reason})" for d in self.drifts[:5])
        more = f" and {len(self.drifts) - 5} more" if len(self.drifts) > 5 else ""
        causes = self.causes
        if causes:
            why = "likely cause: " + "; ".join(causes)
        else:
            why = "cause unknown: same seeds and environment as recorded"
            if self.unknown:
                why += f" (not recorded in the golden file: {', '.join(self.unknown)})"
        return f"{len(self.drifts)} request(s) drifted from {self.path.name}: {names}{more}; {why}"

    def as_dict(self) -> dict:
        return {
            "path": str(self.path),
            "passed": self.passed,
            "drifts": [d.__dict__ for d in self.drifts],
            "causes": self.causes,
            "summary": self.describe(),
            "environment_changes": {k: {"golden": a, "now": b} for k, (a, b) in self.environment_changes.items()},
            "environment_unknown": self.unknown,
            "not_in_baseline": self.not_in_baseline,
            "removed": self.removed,
        }


def _some(names: list[str], shown: int = 10) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def load_golden(path: Path, option: str = "--golden") -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MossError("golden file does not exist", file=path, field=option) from None
    except IsADirectoryError:
        raise MossError("is a directory, expected a golden file", file=path, field=option) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MossError(f"not a golden file: {e}", file=path, field=option) from None
    older = OLDER_FORMATS.get(data.get("format")) if isinstance(data, dict) else None
    if older:
        raise MossError(
            f"this golden file is format {data['format']!r}, saved by {older}; its sampled codes cannot match. "
            "Save a new baseline with --save-golden",
            file=path,
            field=option,
        )
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("requests"), dict):
        raise MossError(f"not a golden file (expected format {FORMAT!r})", file=path, field=option)
    return data


def check_golden(path: Path, result: AuditResult) -> GoldenCheck:
    golden = load_golden(path)
    now = golden_document(result)
    drifts = []
    removed = [key for key in golden["requests"] if key not in now["requests"]]
    added = [key for key in now["requests"] if key not in golden["requests"]]
    for key, want in golden["requests"].items():
        got = now["requests"].get(key)
        if got is None:
            continue
        if want.get("seed_source") == SeedSource.NONE:
            continue  # unseeded: not reproducible by design
        cause = None
        if "seed" in want and want["seed"] != got["seed"]:
            cause = f"seed {want['seed']} -> {got['seed'] if got['seed'] is not None else 'none (unseeded)'}"
        codes = got["codes_sha256"], want.get("codes_sha256")
        if None not in codes and codes[0] != codes[1]:
            drifts.append(Drift(key, "codes", f"codes changed ({want.get('frames')} -> {got['frames']} frames)", cause))
        elif got["pcm_sha256"] != want.get("pcm_sha256"):
            same = "same codes" if None not in codes else "codes not reported"
            drifts.append(Drift(key, "pcm", f"{same}, different PCM bytes", cause))
    env_then = golden.get("environment") or {}
    changes = {k: (env_then[k], v) for k, v in now["environment"].items() if k in env_then and env_then[k] != v}
    unknown = [k for k in now["environment"] if k not in env_then]
    return GoldenCheck(path, drifts, changes, unknown, not_in_baseline=added, removed=removed)
