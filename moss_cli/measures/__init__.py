"""One place where audio is measured, and the one rule of what passes at each level; the audit,
`moss diff` and `moss bench --server` judge with it, and their reports format with it.

Public API:
- `LEVELS`: the levels, loosest first: codes, waveform, speech, bitwise. `check_level(level,
  allowed=LEVELS)` returns the level or raises a MossError (field --level) naming the ones allowed;
  a command passes the subset it supports; `AUDIO_LEVELS`: those of a comparison of audio alone.
- `passes(level, min_snr_db, *, codes_equal, pcm_equal, snr_db, same_speech=None) -> bool`: does a
  comparison pass at a level. codes: equal codes (unknown codes: identical PCM stands for them);
  waveform: codes not known to differ and SNR >= min_snr_db (None: identical); speech: identical
  PCM, or `same_speech` (a SpeechJudgement's `.same`; None: not judged, so it fails); bitwise:
  identical PCM.
- waveform.py: the registry `MEASURES` (one `WaveformMeasure` record per waveform measure: its
  JSON key, labels, unit, function and format; SNR, log-spectral distance, max abs),
  `measure(reference, other) -> dict` (every measure by JSON key), `unmeasured()`, `spread(fields)`
  (a record's measures as top-level JSON keys), how reports show them (`format_metrics(values)`:
  one line; `metric_headers()`, `metric_cells(values, measured)`, `audio_metrics(values)`: a page's
  columns and a pair's lines), `first_differing_sample`, and the formatters `format_db`,
  `format_abs`. Signals are float [channels, samples] tensors.
- judgement.py: `judge(level, tolerances, ...) -> Judgement`, the one judgement of a pair that the audit,
  bench and diff report from (its statuses: STATUSES), and `check_speech` here checks its needs up front.
- speech.py: whether two clips sound like "the same speech", judged offline on CPU (the `speech` extra's
  librosa): see its docstring for `judge_speech`, `SpeechJudgement`, `SpeechThresholds`, `require_speech`.
- words.py: whether they say the same words, by an ASR round trip (faster-whisper, jiwer): `judge_words`,
  `WordOptions`, `load_asr`, the corpus figures (`corpus`, `paired_levels`).

A waveform measure is one `WaveformMeasure` record (and its function) in waveform.py plus its
test; the level rule is `passes`, nowhere else (docs/architecture.md, "How to add an audio measure").
"""

from __future__ import annotations

from ..errors import MossError

LEVELS = ("codes", "waveform", "speech", "bitwise")
AUDIO_LEVELS = ("bitwise", "waveform", "speech")  # where only audio is compared (diff, bench --server): no codes


def check_level(level: str, allowed: tuple[str, ...] = LEVELS) -> str:
    """`level`, if it is one of `allowed` (the levels a command supports), else a MossError."""
    if level not in allowed:
        raise MossError(f"unknown level {level!r}; expected one of {', '.join(allowed)}", field="--level")
    return level


def check_speech(level: str, words=None) -> None:
    """Before anything runs: the speech level's packages import, and the word check's model (a
    measures.words.WordOptions, or None) loads; --asr-model at another level is a mistake."""
    if words is not None and level != "speech":
        raise MossError(f"applies at --level speech only (the level is {level})", field="--asr-model")
    if level == "speech":
        from .speech import require_speech

        require_speech()
    if words is not None:
        from .words import load_asr

        load_asr(words.model, words.device)


def passes(
    level: str,
    min_snr_db: float,
    *,
    codes_equal: bool | None,
    pcm_equal: bool,
    snr_db: float | None,
    same_speech: bool | None = None,
) -> bool:
    """Whether a comparison of two clips passes at `level`. `codes_equal` None: the codes are not
    known (a server that reports none); `snr_db` None: identical audio; `same_speech` None: not
    judged."""
    if level == "codes":  # unknown codes: identical audio stands for them
        return pcm_equal if codes_equal is None else codes_equal
    if level == "waveform":  # unknown codes: the SNR alone decides
        return codes_equal is not False and (snr_db is None or snr_db >= min_snr_db)
    if level == "speech":
        return pcm_equal or bool(same_speech)
    return pcm_equal
