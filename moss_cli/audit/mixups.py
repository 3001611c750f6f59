"""Spotting likely mix-ups: two requests with different content that produced the same output.

A batch engine that hands one row's codes to another request (a routing or cache bug) can pass
every per-request comparison when both compositions make the same mistake. Identical codes for
different inputs are a strong hint of that, so the audit warns about them, naming what differs.
Requests with identical content (deliberate twins) are expected to produce identical codes and
are not warned about. (A model that ignores what differs gives the same warning: the tiny test
checkpoints, for one, produce the same codes for different texts that share a seed.)

A server that reports no codes (vllm-omni sends audio only) is judged by its audio: two responses
are the same when their PCM is identical, and nearly the same when they hold as many samples and
the SNR of the later one (in audit order) against the earlier is at least --min-snr-db over the
whole clip. Responses that differ in what the talker reads or the voice it clones (`CONDITIONING`)
never legitimately sound the same, whatever their seeds, so there the judge (verdicts.mixed_up)
fails them as `audio-of-another-request` instead of warning.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field

import numpy as np

from ..io.outcome import Outcome
from ..measures.waveform import format_db, snr_db
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


# What the talker reads and the voice it clones: requests that differ here never share audio,
# whatever their seeds and sampling (prompt fields may not count: vllm-omni drops all but the language).
CONDITIONING = ("text", "ref_text", "ref_audio")
SUBSET = 1024  # samples of a clip that its first, cheap comparison looks at


def _key(content: dict) -> str:
    return json.dumps(content, sort_keys=True, default=str)


@dataclass
class MixUp:
    """`requests` (one per distinct content) differ but produced identical codes, in `runs`; where
    no codes are known (`by_audio`), identical or nearly identical audio."""

    requests: list[str]
    differs: list[str]  # the content fields that are not the same for all of them: "text", "seed", ...
    frames: int | None  # None: a server that reports no frame count
    runs: list[tuple[str, str]] = field(default_factory=list)  # (scenario, run); scenario "reference": alone
    of_runs: int = 0  # how many runs the audit made in all
    members: list[str] = field(default_factory=list)  # every request with that output, twins too; the first leads
    by_audio: bool = False  # no codes known (a server that sends audio only): grouped by their audio
    snr_db: float | None = None  # by audio: the lowest SNR of a member against the first; None: identical PCM
    strangers: dict[str, list[str]] = field(default_factory=dict)  # member -> CONDITIONING fields unlike the first's

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
        if not self.by_audio:
            what = f"identical codes ({self.frames} frames)"
        elif self.snr_db is None:
            what = "identical audio"
        else:
            what = f"nearly identical audio (SNR {format_db(self.snr_db)} dB)"
        return f"requests {names} differ ({', '.join(self.differs)}) but produced {what} {where}: {why}"

    def as_dict(self) -> dict:
        return {
            "kind": "identical-audio" if self.by_audio else "identical-codes",
            "requests": self.requests,
            "differs": self.differs,
            "frames": self.frames,
            "snr_db": self.snr_db,
            "runs": [f"{s}/{r}" for s, r in self.runs],
            "of_runs": self.of_runs,
            "scenarios": self.scenarios,
            "message": self.message,
        }


def find_mixups(outputs: dict[str, Outcome], order: dict[str, int], min_snr_db: float | None = None) -> list[MixUp]:
    """Groups of distinct contents with the same output in one run: identical codes, or where no
    codes are known, identical audio or (with `min_snr_db`) nearly identical audio. Each group is
    led by its first request (in `order`), which stands for its twins in `requests`."""
    keys = sorted(outputs, key=lambda k: (order.get(k, len(order)), k))
    same = _same_codes([k for k in keys if outputs[k].codes_key is not None], outputs)
    same |= _same_audio([k for k in keys if outputs[k].codes_key is None], outputs, min_snr_db)
    groups: dict[str, list[str]] = {}
    for key in keys:
        if key in same:
            groups.setdefault(same[key][0], []).append(key)
    found = []
    for first, members in groups.items():
        contents: dict[str, str] = {}  # content -> the first request with it
        for key in members:
            contents.setdefault(_key(outputs[key].content), key)
        ids = list(contents.values())
        if len(ids) < 2:
            continue
        lead = outputs[first].content
        differs = [f for f in lead if len({_key({f: outputs[i].content.get(f)}) for i in ids}) > 1]
        strangers = {}
        for key in members[1:]:
            unlike = [f for f in CONDITIONING if _key({f: outputs[key].content.get(f)}) != _key({f: lead.get(f)})]
            if unlike:
                strangers[key] = unlike
        snrs = [same[k][1] for k in members if same[k][1] is not None]
        found.append(
            MixUp(
                ids,
                differs,
                outputs[first].frames,
                members=members,
                by_audio=outputs[first].codes_key is None,
                snr_db=min(snrs, default=None),
                strangers=strangers,
            )
        )
    return found


def _same_codes(keys: list[str], outputs: dict[str, Outcome]) -> dict[str, tuple[str, None]]:
    """Each request -> (the first request with identical codes, None). Empty outputs are left
    out: there is nothing in them to mix up."""
    first: dict = {}
    same = {}
    for key in keys:
        out = outputs[key]
        if (out.frames if out.frames is not None else out.pcm.shape[0]) == 0:
            continue
        same[key] = (first.setdefault(out.codes_key, key), None)
    return same


def _same_audio(keys: list[str], outputs: dict[str, Outcome], min_snr_db: float | None) -> dict:
    """Each request -> (the first request whose audio its audio equals, None) or nearly equals,
    (that request, the SNR in dB). Empty and silent clips are left out: there is nothing in them
    to tell apart.

    Cheap for many responses: identical PCM is found by its hash, and only the first clip of each
    distinct PCM is measured, against earlier first clips of the same shape. Two necessary
    conditions, each sound, pick the few worth measuring: with r = 10^(-min_snr_db/20), an SNR of
    at least min_snr_db means ||a - b|| <= r ||a||, so ||a|| / (1 + r) <= ||b|| <= ||a|| / (1 - r)
    (the triangle inequality; the leads are kept sorted by norm), and the squared difference over
    every k-th sample (SUBSET of them) is at most (r ||a||)^2 too."""
    by_hash: dict[str, str] = {}
    leads: dict[tuple, list[tuple[float, int, str]]] = {}  # pcm shape -> (norm, rank, request) of each lead so far
    subsets: dict[str, np.ndarray] = {}  # lead -> every k-th sample of its PCM
    same: dict[str, tuple[str, float | None]] = {}
    r = None if min_snr_db is None else 10.0 ** (-min_snr_db / 20.0)
    for rank, key in enumerate(keys):
        pcm = outputs[key].pcm
        if not pcm.any():
            continue
        sha = outputs[key].pcm_sha256
        if sha in by_hash:
            same[key] = same[by_hash[sha]]
            continue
        by_hash[sha] = key
        same[key] = (key, None)
        if r is None:
            continue
        flat = pcm.reshape(-1)
        norm = math.sqrt(float(np.einsum("i,i->", flat, flat, dtype=np.int64)))  # exact, and no copy of the clip
        subset = flat[:: max(1, flat.size // SUBSET)].astype(np.float64)
        shaped = leads.setdefault(pcm.shape, [])
        low = norm / (1.0 + r) * (1 - 1e-6)
        high = norm / (1.0 - r) * (1 + 1e-6) if r < 1.0 else math.inf
        candidates = shaped[bisect.bisect_left(shaped, (low,)) : bisect.bisect_right(shaped, (high, math.inf))]
        candidates.sort(key=lambda c: c[1])  # the earliest lead that matches leads the group
        if candidates:
            apart = ((np.stack([subsets[lead] for _, _, lead in candidates]) - subset) ** 2).sum(axis=1)
            bound = (np.array([n for n, _, _ in candidates]) * r) ** 2 * (1 + 1e-6)
            for (_, _, lead), close in zip(candidates, apart <= bound):
                snr = snr_db(outputs[lead].waveform, outputs[key].waveform) if close else -math.inf
                if snr is None or snr >= min_snr_db:
                    same[key] = (lead, snr)
                    break
        if same[key][0] == key:
            bisect.insort(shaped, (norm, rank, key))
            subsets[key] = subset
    return same


class MixUpLog:
    """Collects the mix-ups of every run: one per group of requests, with all its runs. Where no
    codes are known, audio within `min_snr_db` counts as the same (see the module's doc)."""

    def __init__(self, order: list[str], min_snr_db: float | None = None) -> None:
        self.rank = {key: i for i, key in enumerate(order)}  # audited requests first, in file order
        self.min_snr_db = min_snr_db
        self.groups: dict[tuple[str, ...], MixUp] = {}
        self.runs = 0

    def add(self, scenario: str, run: str, outputs: dict[str, Outcome]) -> list[MixUp]:
        """Logs the mix-ups of one run's outputs and returns them."""
        self.runs += 1
        found = find_mixups(outputs, self.rank, self.min_snr_db)
        for m in found:
            kept = self.groups.setdefault(tuple(m.requests), m)
            kept.runs.append((scenario, run))
        return found

    @property
    def found(self) -> list[MixUp]:
        for m in self.groups.values():
            m.of_runs = self.runs
        return list(self.groups.values())
