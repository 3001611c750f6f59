"""Comparing two runs id by id, streaming: the manifests' hashes first; each audio file is read once
to check it still holds what its manifest says, and decoded to a waveform (SNR, log-spectral
distance, max abs) only where the two PCM hashes differ. No audio is kept beyond the pair at hand."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from ..audit.verdicts import UNSEEDED_NOT_REPRODUCIBLE
from ..config.effective import SeedSource
from ..io.audio import pcm_sha256
from ..measures.judgement import DIFFERENT_SPEECH, DIFFERENT_WORDS, DIFFERS, IDENTICAL, Judgement, Tolerances, judge
from ..measures.speech import DIFF_SIDES
from ..measures.waveform import first_differing_sample, measure, spread, unmeasured
from .causes import likely_cause


@dataclass
class DiffCase:
    id: str
    verdict: str  # "pass" | "fail" | "unseeded"
    status: str  # the judgement's (measures.judgement.STATUSES), or "only-a" | "only-b"
    cause: str  # why it differs ("-" when identical)
    detail: str
    a: dict | None  # what each side says of the id (hashes, frames, duration, seed)
    b: dict | None
    codes_equal: bool | None = None
    pcm_equal: bool | None = None
    audio_compared: bool = False  # the waveform measures were taken (both sides have audio)
    # The waveform measures by JSON key (measures.waveform.MEASURES), None until measured; an SNR of
    # None once measured: identical (infinite).
    measures: dict[str, float | None] = field(default_factory=unmeasured)
    first_diverging_s: float | None = None
    speech: dict | None = None  # --level speech: the speech measures (measures.speech.SpeechJudgement)
    words: dict | None = None  # --level speech with --asr-model: the words heard (measures.words.WordsJudgement)

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def as_dict(self) -> dict:
        return spread(self.__dict__)


@dataclass
class DiffResult:
    a: object  # sides.Side
    b: object
    level: str
    min_snr_db: float
    cases: list[DiffCase]
    environment_changes: dict[str, tuple] = field(default_factory=dict)  # field -> (a, b), where both record it
    elapsed_s: float = 0.0
    asr_model: str | None = None  # --level speech: the model that heard the words (None: not heard)

    @property
    def passed(self) -> bool:
        return not any(c.failed for c in self.cases)


def _facts(row: dict) -> dict:
    keys = ("codes_sha256", "pcm_sha256", "frames", "duration_s", "seed", "seed_source")
    return {k: row.get(k) for k in keys}


def _read(path: Path | None) -> tuple[np.ndarray, int] | None:
    if path is None or not path.is_file():
        return None
    try:
        data, rate = sf.read(str(path), dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError):
        return None
    return data, rate


def _float(pcm: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(pcm.T.astype(np.float32) / 32767.0)  # [channels, samples], as written


class _Pair:
    """One id on both sides: hashes from the manifests, checked against (and replaced by) the files."""

    def __init__(self, key: str, a, b) -> None:
        self.key, self.rows = key, (a.rows[key], b.rows[key])
        self.notes: list[str] = []
        self.fingerprints = (a.fingerprints.get(key), b.fingerprints.get(key))
        self.audio, hashes = zip(*(self._audio(side) for side in (a, b)))
        codes = [row.get("codes_sha256") for row in self.rows]  # None: not known (a server sent no codes hash)
        self.codes_equal = None if None in codes else codes[0] == codes[1]
        self.pcm_equal = hashes[0] == hashes[1]

    def _audio(self, side) -> tuple:
        """(samples and rate or None, the PCM hash: the file's when it has one, else the manifest's)."""
        listed = side.rows[self.key]["pcm_sha256"]
        path = side.audio(self.key)
        if path is None:
            return None, listed
        got = _read(path)
        if got is None:
            self.notes.append(f"{side.label}: audio file {path.name} is missing or unreadable")
            return None, listed
        actual = pcm_sha256(got[0])
        if actual != listed:
            self.notes.append(f"{side.label}: {path.name} no longer holds the audio its manifest lists")
        return got, actual


def _measure(case: DiffCase, pair: _Pair, level: str, tolerances: Tolerances) -> Judgement:
    """The waveform measures, and the judgement at `level` (at --level speech: whether B says what A says)."""
    (pcm_a, rate), (pcm_b, _) = pair.audio
    a, b = _float(pcm_a), _float(pcm_b)
    case.audio_compared = True
    case.measures = measure(a, b)
    sample = first_differing_sample(a, b)
    case.first_diverging_s = None if sample is None else sample / rate
    row = pair.rows[0]
    judged = judge(
        level, tolerances, pcm_equal=pair.pcm_equal, codes_equal=pair.codes_equal, snr_db=case.measures["snr_db"],
        clips=(a, b, rate), text=row.get("text") or None, language=row.get("language") or None, sides=DIFF_SIDES,
    )  # fmt: skip
    case.speech = judged.speech.as_dict() if judged.speech else None
    case.words = judged.words.as_dict() if judged.words else None
    return judged


def _judge(
    case: DiffCase,
    pair: _Pair,
    level: str,
    changes: dict[str, tuple],
    allow_unseeded: bool,
    judged: Judgement | None = None,
) -> None:
    """`judged`: the two sides' audio judged at `level`; None where there is no audio to judge (a golden
    file keeps hashes only), so only identical passes."""
    if pair.pcm_equal and pair.codes_equal is not False and not pair.notes:  # unknown codes: the PCM decides
        case.status, case.cause = IDENTICAL, "-"
        return
    case.status = DIFFERS if judged is None or pair.notes else judged.status
    case.cause, case.detail = likely_cause(pair.rows, pair.codes_equal, pair.fingerprints, changes)
    if judged is not None and (judged.speech is not None or judged.words is not None):
        said = f"{'the same' if judged.passed else 'not the same'} speech ({judged.describe()})"
        case.detail = f"{case.detail}; {said}" if case.detail else said
        if judged.status in (DIFFERENT_SPEECH, DIFFERENT_WORDS):
            case.cause = judged.status
    if pair.notes:
        # What the manifests say still stands; only a difference between them has a cause to name.
        listed = [row["pcm_sha256"] for row in pair.rows]
        same = listed[0] == listed[1] and pair.codes_equal is not False
        why = "both manifests list the same audio" if same else case.detail
        case.cause, case.detail = "file-changed", "; ".join([*pair.notes, why])
    elif level == "waveform" and pair.codes_equal and not case.audio_compared:
        case.detail += "; no audio to measure the SNR on (a golden file keeps hashes only)"
    if judged is not None and judged.passed and not pair.notes:
        case.verdict = "pass"
    elif {r.get("seed_source") for r in pair.rows} == {SeedSource.NONE} and not pair.notes:
        unseeded = "no seed on either side (none of its own, and the deploy file gives stage 0 none)"
        unseeded += ": drawn from the global RNG"
        if allow_unseeded:
            case.verdict, case.cause, case.detail = "unseeded", "unseeded", f"{unseeded}, expected to vary"
        else:  # not reproducible, as the audit judges an unseeded request whose two runs alone differ
            case.verdict, case.cause = "fail", UNSEEDED_NOT_REPRODUCIBLE
            case.detail = f"not reproducible: {unseeded} (give the deploy file a stage-0 seed, or the request a seed)"
    else:
        case.verdict = "fail"


def environment_changes(a, b) -> dict[str, tuple]:
    """Fields both sides record (golden files, run directories) with different values."""
    if a.environment is None or b.environment is None:
        return {}
    return {k: (v, b.environment[k]) for k, v in a.environment.items() if k in b.environment and b.environment[k] != v}


def diff_runs(
    a,
    b,
    level: str = "bitwise",
    min_snr_db: float = 60.0,
    allow_unseeded: bool = False,
    tolerances: Tolerances | None = None,
) -> DiffResult:
    """`allow_unseeded`: an id unseeded on both sides that differs is `unseeded`, not a failure;
    `tolerances`: the speech level's thresholds and word check (min_snr_db is `min_snr_db`'s)."""
    tolerances = replace(tolerances or Tolerances(), min_snr_db=min_snr_db)
    start = time.perf_counter()
    changes = environment_changes(a, b)
    cases = []
    for key in a.rows:
        if key not in b.rows:
            cases.append(DiffCase(key, "fail", "only-a", "missing", f"only in A ({a.path})", _facts(a.rows[key]), None))
            continue
        pair = _Pair(key, a, b)
        case = DiffCase(key, "pass", "identical", "-", "", _facts(pair.rows[0]), _facts(pair.rows[1]))
        case.codes_equal, case.pcm_equal = pair.codes_equal, pair.pcm_equal
        judged = None
        if not pair.pcm_equal and all(got is not None for got in pair.audio):
            judged = _measure(case, pair, level, tolerances)  # only here is audio decoded to a waveform
        _judge(case, pair, level, changes, allow_unseeded, judged)
        cases.append(case)
    for key in b.rows:
        if key not in a.rows:
            cases.append(DiffCase(key, "fail", "only-b", "missing", f"only in B ({b.path})", None, _facts(b.rows[key])))
    model = tolerances.words.model if tolerances.words is not None else None
    return DiffResult(a, b, level, min_snr_db, cases, changes, time.perf_counter() - start, model)
