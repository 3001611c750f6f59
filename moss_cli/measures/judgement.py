"""One judgement of two clips of one request at a level, in one vocabulary: the audit (a response under load
against it alone), `moss bench --server` (the same) and `moss diff` (a request's audio on two sides) all
report from `judge`, and none decides on a measure itself.

- `judge(level, tolerances, *, pcm_equal, codes_equal, snr_db, clips, text, language, sides) -> Judgement`:
  `clips` (reference, other, sample_rate) are needed at the speech level only. The status is one of
  STATUSES: `identical`; `same-codes` (the codes level: equal codes, other PCM); `within-snr` (the waveform
  level: SNR at or above --min-snr-db); `same-speech` (the speech level: the same sound, and where
  --asr-model is given the same words); `differs` (it fails the level without a speech judgement);
  `different-speech` (the sound's shape differs: measures.speech); `different-words` (the same sound, yet
  a word the response alone said is lost: measures.words).
- `Tolerances`: --min-snr-db, the speech thresholds, and the word check's options (None: sound only).
- `judged_metrics(speech, words)`: a page's lines for a pair, from the two judgements' JSON.
- `Judgement`: `.status`, `.passed`, `.speech` (SpeechJudgement), `.words` (WordsJudgement), `.notes`,
  `.describe()` (every measure next to its threshold, in one line), `.as_dict()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import passes
from .speech import AUDIT_SIDES, RATE, SpeechJudgement, SpeechThresholds, at_16k, judge_speech
from .words import Score, WordOptions, WordsJudgement, judge_words, load_asr, score

IDENTICAL, SAME_CODES, WITHIN_SNR, SAME_SPEECH = "identical", "same-codes", "within-snr", "same-speech"
DIFFERS, DIFFERENT_SPEECH, DIFFERENT_WORDS = "differs", "different-speech", "different-words"
STATUSES = (IDENTICAL, SAME_CODES, WITHIN_SNR, SAME_SPEECH, DIFFERS, DIFFERENT_SPEECH, DIFFERENT_WORDS)
PASSING = (IDENTICAL, SAME_CODES, WITHIN_SNR, SAME_SPEECH)
# Said once per report where the speech level ran without a model: what it did not check, and how to.
WORDS_UNCHECKED = (
    "the words were not checked (sound only): pass --asr-model (a faster-whisper model name, or a local "
    "CTranslate2 Whisper folder) to hear them"
)


@dataclass(frozen=True)
class Tolerances:
    min_snr_db: float = 60.0
    speech: SpeechThresholds = field(default_factory=SpeechThresholds)
    words: WordOptions | None = None  # the speech level's word check (None: the sound alone decides)


@dataclass
class Judgement:
    status: str
    speech: SpeechJudgement | None = None
    words: WordsJudgement | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status in PASSING

    def describe(self) -> str:
        said = [j.describe() for j in (self.speech, self.words) if j is not None]
        return "; ".join(said + self.notes)

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "speech": self.speech.as_dict() if self.speech else None,
            "words": self.words.as_dict() if self.words else None,
            "notes": list(self.notes),
        }


def judge(
    level: str,
    tolerances: Tolerances,
    *,
    pcm_equal: bool,
    codes_equal: bool | None,
    snr_db: float | None,
    clips: tuple | None = None,
    text: str | None = None,
    language: str | None = None,
    sides: tuple[str, str] = AUDIT_SIDES,
) -> Judgement:
    """Two clips of one request at `level` (the module's docstring)."""
    if pcm_equal and codes_equal is not False:
        return Judgement(IDENTICAL)
    if level != "speech" or clips is None:
        ok = passes(level, tolerances.min_snr_db, codes_equal=codes_equal, pcm_equal=pcm_equal, snr_db=snr_db)
        return Judgement({"codes": SAME_CODES, "waveform": WITHIN_SNR}.get(level, IDENTICAL) if ok else DIFFERS)
    reference, other, rate = clips
    ref, oth = (at_16k(clip, rate) for clip in (reference, other))  # as both checks hear them, made once
    sound = judge_speech(ref, oth, RATE, tolerances.speech, sides)
    if not sound.same:
        return Judgement(DIFFERENT_SPEECH, sound)
    if tolerances.words is None:
        return Judgement(SAME_SPEECH, sound, notes=["words not checked"])
    if not text:
        return Judgement(SAME_SPEECH, sound, notes=["words not checked: the request has no text"])
    asr = load_asr(tolerances.words.model, tolerances.words.device)
    words = judge_words(ref, oth, text, language, asr, tolerances.words)
    return Judgement(SAME_SPEECH if words.same else DIFFERENT_WORDS, sound, words)


def asr_seconds(options: WordOptions | None) -> float:
    """The seconds the word check's model has spent so far in this process (0 without one)."""
    return 0.0 if options is None else load_asr(options.model, options.device).seconds


def scores(clips: tuple, text: str, language: str | None, options: WordOptions) -> tuple[Score, Score]:
    """Both clips' transcripts scored against the request's text (for a corpus's error rates): `clips` as
    `judge` takes them. Identical clips are transcribed once."""
    asr = load_asr(options.model, options.device)
    reference, other, rate = clips
    ref, oth = (at_16k(clip, rate) for clip in (reference, other))
    return score(asr, ref, text, language, options.normalizer), score(asr, oth, text, language, options.normalizer)


# A differing pair on a page (audit, bench, diff): the judgement's measures as (label, value) lines, from the
# JSON of its speech and word judgements.
def judged_metrics(speech: dict | None, words: dict | None) -> list[tuple[str, str]]:
    """The sound's measures, each next to its threshold, then what was heard in each clip."""
    sides = (speech or {}).get("sides") or list(AUDIT_SIDES)
    return _sound_metrics(speech, sides) + _words_metrics(words, sides)


def _words_metrics(words: dict | None, sides: list[str]) -> list[tuple[str, str]]:
    """--asr-model: what was heard in each clip, its error rate against the text, and each word lost."""
    if not words:
        return []
    unit = "CER" if words["unit"] == "character" else "WER"
    (alone, here), (rate_alone, rate_here) = words["transcripts"], words["error_rates"]
    out = [
        (f"heard {sides[0]} ({unit} {rate_alone:.1%})", alone or "(nothing)"),
        (f"heard {sides[1]} ({unit} {rate_here:.1%})", here or "(nothing)"),
        ("normalizer", words["normalizer"]),
    ]
    for a in words["accused"]:
        fits = ", ".join(
            f"{name} {'not measured' if a[key] is None else f'x{a[key]:.3g}'}"
            for name, key in (("text fit", "fit_ratio"), ("heard fit", "heard_fit_ratio"))
        )
        out.append((f"lost {a['word']!r}", f"heard {a['heard'] or 'nothing'!r} (p {a['probability']:.2f}), {fits}"))
    return out + [("note", note) for note in words.get("notes") or []]


def _sound_metrics(speech: dict | None, sides: list[str]) -> list[tuple[str, str]]:
    """--level speech: whether it sounds like the same speech, each measure next to its threshold, both durations."""
    if not speech:
        return []
    out = [("same speech", "yes" if speech["same"] else f"no ({speech['failed']} failed)")]
    for m in speech["measures"]:
        value = "not measurable" if m["value"] is None else f"{m['value']:.3g}"
        out.append((f"{m['name']} (threshold {m['threshold']})", f"{value}{'' if m['passed'] else ': FAILED'}"))
    alone_s, here_s = speech["durations"]
    out.append((f"duration ({sides[0]} / {sides[1]})", f"{alone_s:.2f} s / {here_s:.2f} s"))
    return out + [("note", note) for note in speech.get("notes") or []]
