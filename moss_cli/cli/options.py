"""Options that `moss synth` and `moss audit-determinism` share, written once: each as an
`Annotated` alias, gathered in groups (the local engine's, Ray's; server_options.py: --server's)
that `with_options` adds to a command, and a builder per group that turns its parsed values into
the library's options."""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import numbers
from .common import Device, DType

DeployOption = Annotated[
    Optional[Path],
    typer.Option(
        "--deploy", help="vllm-omni deploy YAML (default: the tiny recipe, or vllm-omni's v1.5 defaults with --model)."
    ),
]
AllowForeignDeploy = Annotated[
    bool,
    typer.Option(
        "--allow-foreign-deploy", help="Use a deploy file written for another model (a warning instead of an error)."
    ),
]
ModelOption = Annotated[
    Optional[Path], typer.Option("--model", help="Talker checkpoint directory (default: the shipped tiny one).")
]
CodecOption = Annotated[
    Optional[Path], typer.Option("--codec", help="Audio tokenizer checkpoint directory (with --model).")
]
DeviceOption = Annotated[Device, typer.Option("--device", help="Where to run.")]
DTypeOption = Annotated[DType, typer.Option("--dtype", help="Model dtype (auto: float32 on CPU, bfloat16 elsewhere).")]
MaxBatchOption = Annotated[
    Optional[int],
    typer.Option(
        "--max-batch", callback=numbers.BATCH, help="Requests in flight at once (default: stage-0 max_num_seqs)."
    ),
]
ThreadsOption = Annotated[
    Optional[int],
    typer.Option(
        "--threads",
        callback=numbers.THREADS,
        help="CPU threads for torch (default: 1 for small models, all cores for large ones; "
        "OMP_NUM_THREADS is respected).",
    ),
]
LegacyGlobalRng = Annotated[
    bool,
    typer.Option(
        "--legacy-global-rng",
        help="Negative control: every request draws from the one global RNG in batch order (the pre-fix behaviour).",
    ),
]
BatchInvariant = Annotated[
    bool,
    typer.Option(
        "--batch-invariant/--no-batch-invariant",
        help="Compute every request bitwise as if it ran alone (default); "
        "off: faster kernels whose rounding depends on the batch.",
    ),
]
LayoutOption = Annotated[
    str,
    typer.Option(
        "--layout",
        help="How batch-invariant decode steps are laid out: auto (one padded block where this machine is "
        "verified to allow it, else fixed blocks of --max-batch rows), blocks (those fixed blocks always) or "
        "blocks:R (fixed blocks of R rows: the same bits at every --max-batch). Recorded in the run's environment.",
    ),
]
CompileOption = Annotated[
    bool,
    typer.Option(
        "--compile",
        help="torch.compile the frame step (local transformer, heads, sampler); compiling takes a while "
        "and its time is reported. Stays batch-invariant.",
    ),
]
GraphsOption = Annotated[
    bool,
    typer.Option(
        "--graphs",
        help="Run each decode block's whole step (frame and backbone step) as one fixed-shape graph, captured "
        "as a CUDA graph on CUDA (with --compile, compiled first); capture time counts as compile time. On "
        "other devices the same fixed-shape step runs uncaptured: a check of it, not a speed-up. Stays "
        "batch-invariant.",
    ),
]


def option(name: str, annotation, default) -> inspect.Parameter:
    """One option of a group: its parameter's name, its `Annotated` alias and its default."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def typed_params(command):
    """Typer hands a command converted values (an Enum option's member, a Path, a repeatable option's
    list), but `ctx.params` holds what click parsed, which is the raw text and tuples on some Typer
    releases (0.27 among them). This puts the converted values in `ctx.params` too, so the builders
    below (`synth_options`, `ray_cluster`, `server_settings`) read the same types on every release."""
    hints = typing.get_type_hints(command, include_extras=True)
    contexts = [name for name, hint in hints.items() if isinstance(hint, type) and issubclass(hint, typer.Context)]

    @functools.wraps(command)
    def run(**given):
        for name in contexts:
            given[name].params.update((key, value) for key, value in given.items() if key in given[name].params)
        return command(**given)

    return run


def with_options(*groups: tuple[inspect.Parameter, ...]):
    """Typer has no option groups: this adds each group's options to a command's signature, after
    its own parameters. The command is called with its own; it reads a group's values from
    `ctx.params` (typed: see `typed_params`) through the group's builder (`synth_options`,
    `ray_cluster`, `server_settings`)."""

    def decorate(command):
        hints = typing.get_type_hints(command, include_extras=True)
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in inspect.signature(command).parameters.values()
        ]
        every = own + [p for group in groups for p in group]

        @functools.wraps(command)
        def run(**given):
            return command(**{p.name: given[p.name] for p in own})

        run.__signature__ = inspect.Signature(every)
        run.__annotations__ = {p.name: p.annotation for p in every}
        return run

    return decorate


ENGINE_OPTIONS = (
    option("deploy", DeployOption, None),
    option("allow_foreign_deploy", AllowForeignDeploy, False),
    option("model", ModelOption, None),
    option("codec", CodecOption, None),
    option("device", DeviceOption, Device.auto),
    option("dtype", DTypeOption, DType.auto),
    option("max_batch", MaxBatchOption, None),
    option("threads", ThreadsOption, None),
    option("compile", CompileOption, False),
    option("graphs", GraphsOption, False),
    option("legacy_global_rng", LegacyGlobalRng, False),
    option("batch_invariant", BatchInvariant, True),
    option("layout", LayoutOption, "auto"),
)


def synth_options(params: dict, **overrides):
    """The pipeline's `SynthOptions` from a command's options above (`ctx.params`; `overrides` win)
    (imports torch: call it inside a command)."""
    from ..pipeline import SynthOptions

    given = {**params, **overrides}
    return SynthOptions(
        deploy=given.get("deploy"),
        model=given.get("model"),
        codec=given.get("codec"),
        device=given.get("device", Device.auto).value,
        dtype=given.get("dtype", DType.auto).value,
        max_batch=given.get("max_batch"),
        legacy_global_rng=given.get("legacy_global_rng", False),
        numerics=numerics(given.get("batch_invariant", True), given.get("layout", "auto")),
        threads=given.get("threads"),
        allow_foreign_deploy=given.get("allow_foreign_deploy", False),
        compile=given.get("compile", False),
        graphs=given.get("graphs", False),
    )


def numerics(batch_invariant: bool, layout: str):
    """The `Numerics` of --batch-invariant and --layout (a bad --layout is a MossError naming it)."""
    from ..errors import MossError
    from ..numerics import Layout, Numerics

    if layout != "auto" and not batch_invariant:
        raise MossError(
            "--layout lays out batch-invariant steps; it means nothing with --no-batch-invariant", field="--layout"
        )
    try:
        return Numerics(batch_invariant=batch_invariant, layout=Layout.parse(layout))
    except ValueError as e:
        raise MossError(str(e), field="--layout") from None


RAY_PANEL = "On a Ray cluster (docs/scale-out.md)"
RayOption = Annotated[
    bool,
    typer.Option(
        "--ray",
        rich_help_panel=RAY_PANEL,
        help="Run on Ray workers (pip install 'moss-tts-repro[ray]'): a local Ray started for the run, "
        "or the cluster of --ray-address / RAY_ADDRESS.",
    ),
]
RayAddressOption = Annotated[
    Optional[str],
    typer.Option(
        "--ray-address",
        rich_help_panel=RAY_PANEL,
        help="The Ray cluster to join: auto, host:port or ray://host:port (implies --ray).",
    ),
]
WorkersOption = Annotated[
    Optional[int],
    typer.Option(
        "--workers",
        rich_help_panel=RAY_PANEL,
        callback=numbers.WORKERS,
        help="Ray workers, each with its own models and engine (default: one per --gpus-per-worker GPUs, else 1).",
    ),
]
GpusPerWorkerOption = Annotated[
    Optional[float],
    typer.Option(
        "--gpus-per-worker",
        callback=numbers.GPUS_PER_WORKER,
        rich_help_panel=RAY_PANEL,
        help="GPUs (NPUs with --device npu) per Ray worker.",
    ),
]
CpusPerWorkerOption = Annotated[
    Optional[float],
    typer.Option(
        "--cpus-per-worker",
        callback=numbers.CPUS_PER_WORKER,
        rich_help_panel=RAY_PANEL,
        help="CPUs per Ray worker (default 1).",
    ),
]


RAY_OPTIONS = (
    option("ray", RayOption, False),
    option("ray_address", RayAddressOption, None),
    option("workers", WorkersOption, None),
    option("gpus_per_worker", GpusPerWorkerOption, None),
    option("cpus_per_worker", CpusPerWorkerOption, None),
)


def ray_cluster(params: dict):
    """The Ray cluster a command runs on (`RAY_OPTIONS`' values in `ctx.params`), or None for a
    local run (Ray options without --ray are an error)."""
    from ..errors import MossError
    from ..scaleout.cluster import ClusterOptions  # plain values: Ray itself is imported only when it runs

    ray, address, workers = params["ray"], params["ray_address"], params["workers"]
    gpus_per_worker, cpus_per_worker = params["gpus_per_worker"], params["cpus_per_worker"]

    if not ray and address is None:
        given = [
            name
            for name, value in (
                ("--workers", workers),
                ("--gpus-per-worker", gpus_per_worker),
                ("--cpus-per-worker", cpus_per_worker),
            )
            if value is not None
        ]
        if given:
            raise MossError(f"{', '.join(given)} only apply with --ray", field=given[0])
        return None
    return ClusterOptions(
        address=address,
        workers=workers,
        gpus_per_worker=gpus_per_worker or 0.0,
        cpus_per_worker=cpus_per_worker if cpus_per_worker is not None else 1.0,
    )


# --level speech: when a response that differs from its response alone is still the same speech
# (measures.speech.SpeechThresholds; their defaults are calibrated in docs/speech-level.md).
SPEECH_HELP = "--level speech: "
SpeechMaxDtwCost = Annotated[
    float,
    typer.Option(
        "--speech-max-dtw-cost",
        callback=numbers.DTW_COST,
        help=SPEECH_HELP + "the largest mean cosine distance of the two clips' MFCCs along their time warp.",
    ),
]
SpeechMinDurationRatio = Annotated[
    float,
    typer.Option(
        "--speech-min-duration-ratio",
        callback=numbers.FRACTION,
        help=SPEECH_HELP + "the smallest ratio of the shorter clip's speech to the longer's.",
    ),
]
SpeechMinRmsDbfs = Annotated[
    float,
    typer.Option(
        "--speech-min-rms-dbfs", callback=numbers.DBFS, help=SPEECH_HELP + "quieter than this (dBFS) is silence."
    ),
]
SpeechMaxClipped = Annotated[
    float,
    typer.Option(
        "--speech-max-clipped", callback=numbers.FRACTION, help=SPEECH_HELP + "the largest share of clipped samples."
    ),
]
SpeechMaxFlatness = Annotated[
    float,
    typer.Option(
        "--speech-max-flatness",
        callback=numbers.FRACTION,
        help=SPEECH_HELP + "the largest median spectral flatness (above it: noise).",
    ),
]


AsrModel = Annotated[
    Optional[str],
    typer.Option(
        "--asr-model",
        metavar="NAME|FOLDER",
        help=SPEECH_HELP + "also hear the words, with this Whisper model: a faster-whisper name (tiny.en, small, "
        "large-v3, ...; fetched once where the machine reaches the model hub) or a local CTranslate2 folder. "
        "Without it the speech level judges the sound only.",
    ),
]
AsrNormalizer = Annotated[
    str,
    typer.Option(
        "--asr-normalizer",
        metavar="seed-tts|whisper-english",
        help=SPEECH_HELP + "how transcripts and texts are normalized before scoring: seed-tts (punctuation "
        "removed, lower case: Seed-TTS-eval's) or whisper-english (Whisper's English normalizer: numbers, "
        "spellings).",
    ),
]
SpeechMinWordProbability = Annotated[
    float,
    typer.Option(
        "--speech-min-word-probability",
        callback=numbers.FRACTION,
        help=SPEECH_HELP + "a lost word is only blamed where the model heard what replaced it with at least "
        "this probability.",
    ),
]
SpeechMaxFitRatio = Annotated[
    float,
    typer.Option(
        "--speech-max-fit-ratio",
        callback=numbers.FIT_RATIO,
        help=SPEECH_HELP + "and where the text's word fits the response at most this times as well as the "
        "response alone.",
    ),
]


def _speech_defaults() -> dict:
    from ..measures.speech import SpeechThresholds  # numpy only: cheap, but not for every command's --help

    return SpeechThresholds().__dict__


def _word_defaults() -> dict:
    from ..measures.words import WordOptions  # numpy only

    return {f.name: f.default for f in WordOptions.__dataclass_fields__.values()}


SPEECH_FIELDS = {
    "max_dtw_cost": SpeechMaxDtwCost,
    "min_duration_ratio": SpeechMinDurationRatio,
    "min_rms_dbfs": SpeechMinRmsDbfs,
    "max_clipped": SpeechMaxClipped,
    "max_flatness": SpeechMaxFlatness,
}
SpeechMaxWerIncrease = Annotated[
    float,
    typer.Option(
        "--speech-max-wer-increase",
        callback=numbers.FRACTION,
        help=SPEECH_HELP + "the corpus word error rate under load may exceed alone's by this (0.02: 2 points) "
        "before the 95% interval of the difference fails.",
    ),
]
SpeechMinHeardGain = Annotated[
    float,
    typer.Option(
        "--speech-min-heard-gain",
        callback=numbers.FIT_RATIO,
        help=SPEECH_HELP + "and where what was heard instead fits the response at least this times as well as "
        "the response alone.",
    ),
]
WORD_FIELDS = {
    "min_word_probability": SpeechMinWordProbability,
    "max_fit_ratio": SpeechMaxFitRatio,
    "min_heard_gain": SpeechMinHeardGain,
    "max_wer_increase": SpeechMaxWerIncrease,
}
SPEECH_OPTIONS = (
    option("asr_model", AsrModel, None),
    option("asr_normalizer", AsrNormalizer, _word_defaults()["normalizer"]),
    *(option(f"speech_{name}", annotation, _speech_defaults()[name]) for name, annotation in SPEECH_FIELDS.items()),
    *(option(f"speech_{name}", annotation, _word_defaults()[name]) for name, annotation in WORD_FIELDS.items()),
)


def speech_thresholds(params: dict):
    """The speech level's thresholds (`SPEECH_OPTIONS`' values in `ctx.params`)."""
    from ..measures.speech import SpeechThresholds

    return SpeechThresholds(**{name: params[f"speech_{name}"] for name in SPEECH_FIELDS})


def asr_device(params: dict) -> tuple[str, ...]:
    """With --server and --asr-model, --device says where the word check's model runs (the server's own
    settings decide the rest): the option names it frees from the local-engine refusal."""
    return ("device",) if params.get("asr_model") is not None else ()


def word_options(params: dict):
    """The speech level's word check (`SPEECH_OPTIONS`' --asr-* values in `ctx.params`): None without --asr-model.
    The model runs where --device says (auto, or a command without one: CUDA where there is one)."""
    if params.get("asr_model") is None:
        return None
    from ..measures.words import WordOptions

    device = getattr(params.get("device"), "value", params.get("device")) or "auto"
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    thresholds = {name: params[f"speech_{name}"] for name in WORD_FIELDS}
    return WordOptions(params["asr_model"], device, params["asr_normalizer"], **thresholds)
