"""Spotting likely mix-ups: two requests with different content that produced identical codes.

A batch engine that hands one row's codes to another request (a routing or cache bug) can pass
every per-request comparison when both compositions make the same mistake. Identical codes for
different inputs are a strong hint of that, so the audit warns about them, naming what differs.
Requests with identical content (deliberate twins) are expected to produce identical codes and
are not warned about. (A model that ignores what differs gives the same warning: the tiny test
checkpoints, for one, produce the same codes for different texts that share a seed.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..synth import Prepared
from .compare import Output


def request_content(p: Prepared) -> dict:
    """Everything about a request that should shape its codes.

    Left out on purpose: the id, the frame budget (two budgets give the same codes when both
    requests stop early) and, for greedy requests, the seed and the sampling knobs that greedy
    decoding ignores (a greedy pair that differs only there is a twin, not a mix-up)."""
    eff = p.effective
    greedy = not eff.do_sample
    return {
        "text": p.request.text, "prompt fields": p.request.prompt_fields, "ref_text": p.request.ref_text,
        "ref_audio": p.reference.sha256 if p.reference is not None else None,
        "seed": None if greedy else eff.seed,
        "sampling": {"do_sample": eff.do_sample, "repetition_penalty": eff.audio.repetition_penalty,
                     **({} if greedy else {"audio": eff.audio.__dict__, "stop": eff.stop.__dict__})},
    }


def _key(content: dict) -> str:
    return json.dumps(content, sort_keys=True, default=str)


@dataclass
class MixUp:
    """Requests `first` and `second` differ in content but produced identical codes, in `runs`."""

    first: str
    second: str
    differs: list[str]  # the content fields that differ: "text", "seed", ...
    frames: int
    runs: list[tuple[str, str]] = field(default_factory=list)  # (scenario, run); scenario "reference": alone
    of_runs: int = 0  # how many runs the audit made in all

    @property
    def scenarios(self) -> list[str]:
        return list(dict.fromkeys(scenario for scenario, _ in self.runs))

    @property
    def message(self) -> str:
        if len(self.runs) == self.of_runs:
            where = f"in every run ({self.of_runs})"
        else:
            where = f"in {len(self.runs)} of {self.of_runs} runs ({', '.join(self.scenarios)})"
        why = "a likely mix-up"
        if "reference" in self.scenarios:  # alone, nothing else was in the batch to mix up with
            why += ", unless the model ignores the difference (they match when run alone too)"
        return (f"requests {self.first!r} and {self.second!r} differ ({', '.join(self.differs)}) but produced "
                f"identical codes ({self.frames} frames) {where}: {why}")

    def as_dict(self) -> dict:
        return {"kind": "identical-codes", "requests": [self.first, self.second], "differs": self.differs,
                "frames": self.frames, "runs": [f"{s}/{r}" for s, r in self.runs], "of_runs": self.of_runs,
                "scenarios": self.scenarios, "message": self.message}


def find_mixups(outputs: dict[str, Output]) -> list[MixUp]:
    """Pairs of distinct contents with identical codes in one run (the first request of each
    content stands for its twins). Empty outputs are skipped: there is nothing in them to mix up."""
    by_codes: dict[tuple, dict[str, str]] = {}  # codes -> content -> first request id with it
    for key, out in outputs.items():
        if out.codes.shape[0] == 0:
            continue
        codes = (tuple(out.codes.shape), out.codes.cpu().numpy().tobytes())
        by_codes.setdefault(codes, {}).setdefault(_key(out.content), key)
    found = []
    for contents in by_codes.values():
        ids = list(contents.values())
        for i, first in enumerate(ids):
            for second in ids[i + 1:]:
                a, b = outputs[first].content, outputs[second].content
                found.append(MixUp(first, second, [k for k in a if a.get(k) != b.get(k)],
                                   int(outputs[first].codes.shape[0])))
    return found


class MixUpLog:
    """Collects the mix-ups of every run, one warning per pair of requests with all its runs."""

    def __init__(self, order: list[str]) -> None:
        self.rank = {key: i for i, key in enumerate(order)}  # audited requests first, in file order
        self.pairs: dict[tuple[str, str], MixUp] = {}
        self.runs = 0

    def add(self, scenario: str, run: str, outputs: dict[str, Output]) -> None:
        self.runs += 1
        for m in find_mixups(outputs):
            first, second = sorted((m.first, m.second), key=lambda k: (self.rank.get(k, len(self.rank)), k))
            kept = self.pairs.setdefault((first, second), MixUp(first, second, m.differs, m.frames))
            kept.runs.append((scenario, run))

    @property
    def warnings(self) -> list[MixUp]:
        for m in self.pairs.values():
            m.of_runs = self.runs
        return list(self.pairs.values())
