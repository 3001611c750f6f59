"""Golden baselines: each request's codes and PCM hashes alone, plus the environment that made them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import MossError
from ..io.audio import codes_sha256
from .runner import AuditResult

FORMAT = "moss-golden/1"


def golden_document(result: AuditResult) -> dict:
    return {
        "format": FORMAT,
        "level": result.options.level,
        "environment": result.environment,
        "requests": {key: {"codes_sha256": codes_sha256(out.codes), "pcm_sha256": out.pcm_sha256,
                           "frames": int(out.codes.shape[0]), "seed_source": out.seed_source}
                     for key, out in result.reference.items()},
    }


def save_golden(path: Path, result: AuditResult) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(golden_document(result), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class Drift:
    request: str
    reason: str  # "codes" | "pcm" | "missing" | "new"
    detail: str


@dataclass
class GoldenCheck:
    path: Path
    drifts: list[Drift]
    environment_changes: dict[str, tuple]  # field -> (golden, now)

    @property
    def passed(self) -> bool:
        return not self.drifts

    def as_dict(self) -> dict:
        return {"path": str(self.path), "passed": self.passed,
                "drifts": [d.__dict__ for d in self.drifts],
                "environment_changes": {k: {"golden": a, "now": b} for k, (a, b) in self.environment_changes.items()}}


def load_golden(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MossError("golden file does not exist", file=path, field="--golden") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MossError(f"not a golden file: {e}", file=path, field="--golden") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("requests"), dict):
        raise MossError(f"not a golden file (expected format {FORMAT!r})", file=path, field="--golden")
    return data


def check_golden(path: Path, result: AuditResult) -> GoldenCheck:
    golden = load_golden(path)
    now = golden_document(result)
    drifts = []
    for key, want in golden["requests"].items():
        got = now["requests"].get(key)
        if got is None:
            drifts.append(Drift(key, "missing", "in the golden file but not audited now"))
        elif want.get("seed_source") == "none":
            continue  # unseeded: not reproducible by design
        elif got["codes_sha256"] != want.get("codes_sha256"):
            drifts.append(Drift(key, "codes", f"codes changed ({want.get('frames')} -> {got['frames']} frames)"))
        elif got["pcm_sha256"] != want.get("pcm_sha256"):
            drifts.append(Drift(key, "pcm", "same codes, different PCM bytes"))
    env_then = golden.get("environment", {})
    changes = {k: (env_then.get(k), v) for k, v in now["environment"].items() if env_then.get(k) != v}
    return GoldenCheck(path, drifts, changes)
