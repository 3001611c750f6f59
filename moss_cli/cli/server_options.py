"""Options of `--server` (a running speech server), which `moss synth` and `moss audit-determinism`
share (`SERVER_OPTIONS`, a group for `options.with_options`; `moss bench` takes its `CLIENT_OPTIONS`),
and the checks that no option of the local engine is given with it, nor one of the server's without it."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from ..errors import MossError
from . import numbers
from .options import ENGINE_OPTIONS, RAY_OPTIONS, option

ServerOption = Annotated[
    Optional[str],
    typer.Option(
        "--server",
        help="Base URL of a running speech server (vllm-omni, or moss serve), e.g. http://127.0.0.1:8091: "
        "send the requests to its POST /v1/audio/speech instead of running the model here.",
    ),
]
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", callback=numbers.BATCH, help="--server: requests in flight at once.")
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        callback=numbers.SECONDS,
        help="--server: seconds to wait for each read of an answer (its first byte included) before giving up "
        "(exit 2).",
    ),
]
DeadlineOption = Annotated[
    Optional[float],
    typer.Option(
        "--deadline",
        callback=numbers.SECONDS,
        help="--server: seconds a whole answer may take (default: --timeout plus one second per frame of the "
        "request's budget, max_new_frames, or 4096 frames without one); a longer one is an error (exit 2).",
    ),
]
RetriesOption = Annotated[
    int,
    typer.Option(
        "--retries",
        callback=numbers.RETRIES,
        help="--server: re-send a request after a 5xx answer or a reset connection, at most N "
        "times; each re-send is reported.",
    ),
]
HeaderOption = Annotated[
    Optional[List[str]],
    typer.Option(
        "--header",
        help="--server: 'Name: value' sent with every request, e.g. 'Authorization: Bearer $TOKEN' (repeatable). "
        "Values are never printed or written to any report.",
    ),
]
# wav is every command's default: its header says the sample rate and channels, and streamed, vllm-omni
# 0.30.0 sends the same PCM chunks as for pcm, its header in front of the first (serving_speech.py:1669-1691).
ResponseFormatOption = Annotated[
    str,
    typer.Option(
        "--response-format",
        help="--server: the audio format to ask for: wav | pcm | flac (streamed: wav or pcm). wav says its own "
        "sample rate and channels, and a wav stream is the same PCM chunks behind its header; pcm is what vllm "
        "bench serve asks for.",
    ),
]
SampleRateOption = Annotated[
    Optional[int],
    typer.Option(
        "--sample-rate",
        callback=numbers.SAMPLE_RATE,
        help="--server with --response-format pcm: the sample rate when the server sends none "
        "(x-moss-sample-rate; default 48000, MOSS-TTS-Local v1.5's).",
    ),
]
ChannelsOption = Annotated[
    Optional[int],
    typer.Option(
        "--channels",
        callback=numbers.CHANNELS,
        help="--server with --response-format pcm: interleaved channels when the server does not say "
        "(x-moss-channels; default 2, MOSS-TTS-Local v1.5's stereo).",
    ),
]
AllowDroppedFieldsOption = Annotated[
    bool,
    typer.Option(
        "--allow-dropped-fields",
        help="--server: send request fields that vllm-omni's MOSS-TTS-Local drops silently (audio_* sampling "
        "overrides, instruction, tokens, quality, sound_event, ambient_sound) with a warning, instead of "
        "refusing the request file (exit 2). moss serve honours them: they go to it as they are.",
    ),
]
API_KEY_ENV = "MOSS_API_KEY"  # the same variable `moss serve --api-key` reads
ApiKeyOption = Annotated[
    Optional[str],
    typer.Option(
        "--api-key",
        envvar=API_KEY_ENV,
        show_envvar=True,
        help="--server: the server's API key, sent as 'Authorization: Bearer KEY' (moss serve --api-key, vLLM's "
        "--api-key); never printed or written to any report.",
    ),
]
ServedModelOption = Annotated[
    Optional[str],
    typer.Option("--served-model", help="--server: the request body's `model` (default: none; the server's own)."),
]


# How the client talks to the server; `moss bench --server` takes these with its own --server and
# --concurrency (a list of levels to sweep).
CLIENT_OPTIONS = (
    option("timeout", TimeoutOption, 300.0),
    option("deadline", DeadlineOption, None),
    option("retries", RetriesOption, 0),
    option("header", HeaderOption, None),
    option("response_format", ResponseFormatOption, "wav"),
    option("sample_rate", SampleRateOption, None),
    option("channels", ChannelsOption, None),
    option("served_model", ServedModelOption, None),
    option("api_key", ApiKeyOption, None),
    option("allow_dropped_fields", AllowDroppedFieldsOption, False),  # the request file's, not the client's
)
SERVER_OPTIONS = (option("server", ServerOption, None), option("concurrency", ConcurrencyOption, 8), *CLIENT_OPTIONS)


def server_settings(params: dict, **given):
    """The client's `ServerOptions` from `SERVER_OPTIONS`' values in `ctx.params`; `given` wins (the
    bench's in-flight count is the largest of its --concurrency levels)."""
    names = [p.name for p in SERVER_OPTIONS if p.name != "allow_dropped_fields"]
    return server_options(**{**{name: params[name] for name in names}, **given})


def server_options(
    *,
    server: str,
    concurrency: int,
    timeout: float,
    deadline: float | None,
    retries: int,
    header: list[str] | None,
    response_format: str,
    sample_rate: int | None,
    channels: int | None,
    served_model: str | None,
    api_key: str | None = None,
):
    from ..remote.settings import ServerOptions, parse_headers

    headers = parse_headers(header or [])
    if api_key:
        if any(name.lower() == "authorization" for name, _ in headers):
            raise MossError("give the key once: --api-key or an Authorization --header, not both", field="--api-key")
        headers += (("Authorization", f"Bearer {api_key}"),)
    return ServerOptions(
        url=server,
        headers=headers,
        timeout_s=timeout,
        deadline_s=deadline,
        retries=retries,
        concurrency=concurrency,
        model=served_model,
        response_format=response_format.lower(),
        sample_rate=sample_rate,
        channels=channels,
    )


# Parameters of `moss synth` / `moss audit-determinism` that configure the local engine or baseline,
# in the order an error names them.
LOCAL_ONLY = (*(p.name for p in ENGINE_OPTIONS), "stream", *(p.name for p in RAY_OPTIONS))


def refuse_local_options(ctx: typer.Context, allowed: tuple[str, ...] = ()) -> None:
    """With --server the server's own settings decide: an option of the local engine given on the
    command line would be silently meaningless, so it is an error (except those in `allowed`,
    which mean something for a server too)."""
    named = []
    for param in _in_order(ctx, LOCAL_ONLY):
        source = ctx.get_parameter_source(param.name)
        if param.name not in allowed and source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            off = ctx.params.get(param.name) is False and param.secondary_opts
            named.append(param.secondary_opts[0] if off else param.opts[0])
    if named:
        raise MossError(
            f"{', '.join(named)}: only for the local engine, not with --server (the server's own deploy and "
            "settings decide)",
            field=named[0],
        )


# Parameters that only mean something with --server, in the order an error names them.
SERVER_ONLY = (*(p.name for p in SERVER_OPTIONS if p.name != "server"), "stagger_ms")


def _in_order(ctx: typer.Context, names: tuple[str, ...]) -> list:
    """The command's parameters of these names, in their order."""
    params = {param.name: param for param in ctx.command.params}
    return [params[name] for name in names if name in params]


def refuse_server_options(ctx: typer.Context) -> None:
    """Without --server, an option of the server client given on the command line would be silently
    meaningless, so it is an error (MOSS_API_KEY in the environment is not: it may be set for servers)."""
    named = []
    for param in _in_order(ctx, SERVER_ONLY):
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name == "COMMANDLINE":
            named.append(param.opts[0])
    if named:
        raise MossError(f"{', '.join(named)}: only with --server (a running speech server)", field=named[0])
