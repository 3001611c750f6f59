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

from ..io.outcome import Outcome
from ..pipeline import Prepared


def request_content(p: Prepared, seeds_used: bool = True) -> dict:
    """Everything about a request that should shape its codes.

    Left out on purpose: the id, the frame budget (two budgets give the same codes when both
    requests stop early), the seed where the engine does not use it (greedy decoding; the legacy
    global RNG) and the sampling knobs that greedy decoding ignores: requests that differ only
    there are twins, not a mix-up."""
    eff = p.effective
    greedy = not eff.do_sample
    return {
        "text": p.request.text,
        "prompt fields": p.request.prompt_fields,
        "ref_text": p.request.ref_text,
        "ref_audio": p.reference.sha256 if p.reference is not None else None,
        "seed": eff.seed if seeds_used and not greedy else None,
        "sampling": {
            "do_sample": eff.do_sample,
            "repetition_penalty": eff.audio.repetition_penalty,
            **({} if greedy else {"audio": eff.audio.__dict__, "stop": eff.stop.__dict__}),
        },
    }


def _key(content: dict) -> str:
    return json.dumps(content, sort_keys=True, default=str)


@dataclass
class MixUp:
    """`requests` (one per distinct content) differ but produced identical codes, in `runs`."""

    requests: list[str]
    differs: list[str]  # the content fields that are not the same for all of them: "text", "seed", ...
    frames: int | None  # None: a server that reports no frame count
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
        names = ", ".join(repr(r) for r in self.requests[:-1]) + f" and {self.requests[-1]!r}"
        what = f"identical codes ({self.frames} frames)" if self.frames is not None else "identical audio"
        return f"requests {names} differ ({', '.join(self.differs)}) but produced {what} {where}: {why}"

    def as_dict(self) -> dict:
        return {
            "kind": "identical-codes",
            "requests": self.requests,
            "differs": self.differs,
            "frames": self.frames,
            "runs": [f"{s}/{r}" for s, r in self.runs],
            "of_runs": self.of_runs,
            "scenarios": self.scenarios,
            "message": self.message,
        }


def find_mixups(outputs: dict[str, Outcome], order: dict[str, int]) -> list[MixUp]:
    """Groups of distinct contents with identical codes in one run; the first request of each
    content (in `order`) stands for its twins. Empty outputs are skipped: there is nothing in
    them to mix up."""
    by_codes: dict[tuple, dict[str, str]] = {}  # codes -> content -> first request id with it
    for key in sorted(outputs, key=lambda k: (order.get(k, len(order)), k)):
        out = outputs[key]
        if (out.frames if out.frames is not None else out.pcm.shape[0]) == 0:
            continue
        codes = out.codes_key or out.pcm_sha256  # a server that reports no codes: its audio
        by_codes.setdefault(codes, {}).setdefault(_key(out.content), key)
    found = []
    for contents in by_codes.values():
        ids = list(contents.values())
        if len(ids) > 1:
            fields = outputs[ids[0]].content
            differs = [f for f in fields if len({_key({f: outputs[i].content.get(f)}) for i in ids}) > 1]
            found.append(MixUp(ids, differs, outputs[ids[0]].frames))
    return found


class MixUpLog:
    """Collects the mix-ups of every run: one warning per group of requests, with all its runs."""

    def __init__(self, order: list[str]) -> None:
        self.rank = {key: i for i, key in enumerate(order)}  # audited requests first, in file order
        self.groups: dict[tuple[str, ...], MixUp] = {}
        self.runs = 0

    def add(self, scenario: str, run: str, outputs: dict[str, Outcome]) -> None:
        self.runs += 1
        for m in find_mixups(outputs, self.rank):
            kept = self.groups.setdefault(tuple(m.requests), m)
            kept.runs.append((scenario, run))

    @property
    def warnings(self) -> list[MixUp]:
        for m in self.groups.values():
            m.of_runs = self.runs
        return list(self.groups.values())
