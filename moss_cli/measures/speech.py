"""Whether two clips of one request sound like the same speech: judged offline, on CPU, with nothing fetched
at run time (the `speech` extra's librosa). A response under load whose audio differs from its response alone
passes the speech level's sound check when it sounds like the same speech; the words it says are the word
check's (measures/words.py, with --asr-model). The checks, in the order the first failing one is named
(`SpeechJudgement.failed`):

- `sanity`: the other clip is speech at all: not silent (`rms-dbfs` >= min_rms_dbfs), not clipped
  (`clipped-fraction` <= max_clipped), not noise (`spectral-flatness`, the median over frames,
  <= max_flatness);
- `duration-ratio`: the shorter clip's speech (silence trimmed at both ends) over the longer's;
- `mfcc-dtw`: the two clips' MFCCs aligned by dynamic time warping, the path's mean cosine distance
  (language-independent: another rate or pitch of the same words costs little, other words much).

API:
- `judge_speech(reference, other, sample_rate, thresholds=SpeechThresholds(), sides=AUDIT_SIDES)
  -> SpeechJudgement`. `reference`, `other`: int16 or float, numpy or torch, [channels, samples]
  (Outcome.waveform), [samples, channels] (Outcome.pcm) or [samples]; mixed to mono and resampled to
  16 kHz. Silence, an empty clip, exact zeros, NaN or infinite samples and a clip shorter than one MFCC
  window are judged (a failed check with its reason), never raised.
- `SpeechJudgement`: `.same`, `.failed` (None, or one of CHECKS), `.measures` (Measure(name, value,
  threshold, passed) tuples), `.durations` ((reference_s, other_s), whole clips), `.notes`, `.as_dict()`.
- `SpeechThresholds`: the thresholds, with the defaults calibrated in docs/speech-level.md
  ("Calibration"); a CLI names each as `--speech-<field with dashes>` (e.g. --speech-max-dtw-cost).
- `require_speech()`: a MossError with the install line where the extra is missing.
- `CHECKS`: the check names.
Cost: an identical pair returns at once; otherwise about 0.07 CPU-s a pair of 2-5 s clips
(benchmarks/calibrate_speech.py prints it), the first in a process about 2 s more (librosa's import).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import MossError

RATE = 16000  # what the MFCCs are computed at
CHECKS = ("sanity", "duration-ratio", "mfcc-dtw")
INSTALL = "pip install librosa"  # moss's `speech` extra; moss itself comes from a pinned source
_N_FFT, _HOP = 512, 160  # 32 ms windows every 10 ms
_TRIM_DB = 40.0  # below the loudest frame: silence at either end


@dataclass(frozen=True)
class SpeechThresholds:
    max_dtw_cost: float = 0.2  # mfcc-dtw: the largest mean cosine distance along the warping path
    min_duration_ratio: float = 0.7  # duration-ratio: the shorter speech over the longer
    min_rms_dbfs: float = -45.0  # sanity: quieter is silence
    max_clipped: float = 0.01  # sanity: the largest fraction of samples at full scale
    max_flatness: float = 0.3  # sanity: the median spectral flatness above which it is noise


class Measure(NamedTuple):
    name: str
    value: float | None  # None: not measurable (a clip too short)
    threshold: float
    passed: bool


AUDIT_SIDES = ("alone", "here")  # the audit's and the bench's two clips: a response alone, one in a composition
DIFF_SIDES = ("in A", "in B")  # moss diff's: the same request's audio on its two sides


@dataclass
class SpeechJudgement:
    same: bool
    failed: str | None  # the first of CHECKS that failed
    measures: list[Measure]
    durations: tuple[float, float]  # seconds: the reference, the other
    notes: list[str] = field(default_factory=list)
    sides: tuple[str, str] = AUDIT_SIDES  # what the two clips are, in a report's words

    def as_dict(self) -> dict:
        out = asdict(self)
        out["measures"] = [m._asdict() for m in self.measures]
        out["durations"] = list(self.durations)
        out["sides"] = list(self.sides)
        return out

    def describe(self) -> str:
        """Each measure next to its threshold, and both durations named by their sides, in one line."""
        said = []
        for m in self.measures:
            value = "not measurable" if m.value is None else f"{m.value:.3g}"
            said.append(f"{m.name} {value} ({'ok' if m.passed else 'FAILED'}, threshold {m.threshold:g})")
        (first_s, second_s), (first, second) = self.durations, self.sides
        said.append(f"{first_s:.2f} s {first}, {second_s:.2f} s {second}")
        return "; ".join(said + self.notes)


def require_speech() -> None:
    """A MossError naming the install line unless librosa imports. librosa compiles its
    numba kernels as it is first imported (about 12 s on a 2-core machine) into its own __pycache__; where
    that folder is read-only (a shared install), into a cache of the user's, so that the cost is paid once,
    not by every process."""
    _numba_cache()
    try:
        import librosa  # noqa: F401
    except ImportError as e:
        raise MossError(f"the speech level needs {e.name}: {INSTALL}", field="--level") from None


def _numba_cache() -> None:
    import importlib.util
    import os
    from pathlib import Path

    spec = importlib.util.find_spec("librosa")
    if spec is None or spec.origin is None or "NUMBA_CACHE_DIR" in os.environ:
        return
    if not os.access(Path(spec.origin).parent, os.W_OK):
        os.environ["NUMBA_CACHE_DIR"] = str(
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "moss-numba"
        )


def judge_speech(
    reference,
    other,
    sample_rate: int,
    thresholds: SpeechThresholds = SpeechThresholds(),
    sides: tuple[str, str] = AUDIT_SIDES,
) -> SpeechJudgement:
    """Whether `other` is the same speech as `reference` (see the module's docstring); `sides` name the two
    clips in its words (AUDIT_SIDES, DIFF_SIDES)."""
    ref, oth = mono(reference), mono(other)
    durations = (ref.shape[0] / sample_rate, oth.shape[0] / sample_rate)
    if np.array_equal(ref, oth):
        return SpeechJudgement(True, None, [], durations, ["identical audio"], sides)
    require_speech()
    ref, oth = resampled(ref, sample_rate), resampled(oth, sample_rate)
    t = thresholds
    measures = {check: [] for check in CHECKS}
    measures["sanity"] = _sanity(oth, t)
    ref_speech, oth_speech = _trimmed(ref), _trimmed(oth)
    ratio = min(len(ref_speech), len(oth_speech)) / max(len(ref_speech), len(oth_speech), 1)
    measures["duration-ratio"] = [Measure("duration-ratio", ratio, t.min_duration_ratio, ratio >= t.min_duration_ratio)]
    cost = dtw_cost(ref_speech, oth_speech)
    measures["mfcc-dtw"] = [Measure("mfcc-dtw", cost, t.max_dtw_cost, cost is not None and cost <= t.max_dtw_cost)]
    failed = next((check for check in CHECKS if not all(m.passed for m in measures[check])), None)
    flat = [m for check in CHECKS for m in measures[check]]
    return SpeechJudgement(failed is None, failed, flat, durations, [], sides)


def at_16k(clip, sample_rate: int) -> np.ndarray:
    """A clip as both checks hear it: float32 mono at 16 kHz (see `judge_speech` for the layouts taken)."""
    return resampled(mono(clip), sample_rate)


def mono(clip) -> np.ndarray:
    """float32 [samples], full scale 1.0, from int16 or float, numpy or torch, in either layout."""
    x = clip.detach().cpu().numpy() if hasattr(clip, "detach") else np.asarray(clip)
    scale = 1 / 32767.0 if x.dtype == np.int16 else 1.0
    # NaN or infinite samples (a broken float decoder) are no sound: silence and full scale, as a file stores them.
    x = np.nan_to_num(x.astype(np.float32) * np.float32(scale), nan=0.0, posinf=1.0, neginf=-1.0)
    if x.size == 0:  # an empty response (a server answers one when the first frame stops)
        return np.zeros(0, dtype=np.float32)
    if x.ndim == 2:
        x = x.mean(axis=0 if x.shape[0] <= x.shape[1] else 1)  # channels are the shorter axis
    return np.ascontiguousarray(x.reshape(-1))


def resampled(x: np.ndarray, sample_rate: int) -> np.ndarray:
    import soxr

    return x if sample_rate == RATE else soxr.resample(x, sample_rate, RATE).astype(np.float32)


def _sanity(x: np.ndarray, t: SpeechThresholds) -> list[Measure]:
    import librosa

    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0
    dbfs = 20 * math.log10(max(rms, 1e-10))
    clipped = float(np.mean(np.abs(x) >= 0.999)) if x.size else 0.0
    # Over the frames that carry sound: a response padded with digital silence (exact zeros, whose
    # flatness is 1) is still speech; a clip with no such frame is silence, and not speech either.
    flatness = 1.0
    if x.size >= _N_FFT:
        frames = librosa.feature.spectral_flatness(y=x, n_fft=_N_FFT, hop_length=_HOP)[0]
        level = librosa.feature.rms(y=x, frame_length=_N_FFT, hop_length=_HOP)[0]
        sounding = 20 * np.log10(np.maximum(level, 1e-10)) >= t.min_rms_dbfs
        if sounding.any():
            flatness = float(np.median(frames[: len(sounding)][sounding[: len(frames)]]))
    return [
        Measure("rms-dbfs", dbfs, t.min_rms_dbfs, dbfs >= t.min_rms_dbfs),
        Measure("clipped-fraction", clipped, t.max_clipped, clipped <= t.max_clipped),
        Measure("spectral-flatness", flatness, t.max_flatness, flatness <= t.max_flatness),
    ]


def _trimmed(x: np.ndarray) -> np.ndarray:
    """The clip without the silence at its two ends (the whole clip where that leaves too little)."""
    import librosa

    if x.size < _N_FFT:
        return x
    speech, _ = librosa.effects.trim(x, top_db=_TRIM_DB, frame_length=_N_FFT, hop_length=_HOP)
    return speech if speech.size >= _N_FFT else x


def dtw_cost(a: np.ndarray, b: np.ndarray) -> float | None:
    """The mean cosine distance along the DTW path between two 16 kHz clips' MFCCs (each
    coefficient's mean removed; c0, the loudness, left out). None: a clip too short to measure."""
    import librosa
    from scipy.spatial.distance import cdist

    if min(a.size, b.size) < _N_FFT:
        return None
    fa, fb = (_mfcc(x) for x in (a, b))
    # A frame of exact digital silence has no direction (every coefficient equals its mean): its cosine
    # distance is undefined (NaN, which the DTW refuses); it is taken as unlike anything, 1.
    distances = np.nan_to_num(cdist(fa.T, fb.T, metric="cosine"), nan=1.0, posinf=1.0, neginf=1.0)
    cost, path = librosa.sequence.dtw(C=distances)
    return float(cost[-1, -1] / len(path))


def _mfcc(x: np.ndarray) -> np.ndarray:
    import librosa

    m = librosa.feature.mfcc(y=x, sr=RATE, n_mfcc=20, n_fft=_N_FFT, hop_length=_HOP, n_mels=40)[1:]
    return m - m.mean(axis=1, keepdims=True)
