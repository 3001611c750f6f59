"""What a command that sends requests of its own to a speech server (the server audit, `moss bench
--server`) knows before it sends them, learnt one way for both:
- the deploy file the server runs, read first, so a bad one fails before anything is sent; its stage-0
  seed is the one unseeded requests must get;
- what the server is (`SpeechClient.probe`): a silent one fails within seconds, and it decides which
  request-file fields are dropped (vllm-omni's MOSS-TTS-Local drops some, moss serve none);
- the request set: a request file's, or the built-in one;
- whether the server requires a reference voice: vllm-omni's MOSS-TTS-Local refuses a request without
  `ref_audio` (tts_adapters/moss_tts.py:420-431 in the 0.30.0 wheel: "MOSS-TTS-Local-Transformer requires
  'ref_audio' ..."), `moss serve` does not. Learnt from the server's answer to one short request sent
  without one; where it does, the built-in requests carry a synthetic voice (`voice.py`) and a request
  file's must carry their own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config.builtin import builtin_requests
from ..config.deploy import load_deploy
from ..config.deploy_config import DeployConfig
from ..config.requests import Request
from ..errors import MossError
from ..speech_api import body_from_request
from .client import ServerError, ServerInfo, SpeechClient, probe
from .request_file import read_for_server
from .settings import ServerOptions
from .voice import default_voice, with_voice

VOICE_NOT_REQUIRED = "not required: the server answers a request without ref_audio"
PROBE_FRAMES = 2  # the voice probe's max_new_tokens: its audio is not used


@dataclass
class ServerSession:
    server: ServerOptions
    deploy: DeployConfig | None  # the deploy file the server runs (--deploy), for CUDA, where vllm-omni serves
    deploy_file: Path | None
    info: ServerInfo
    requests: list[Request]
    request_file: Path | None  # None: the built-in set
    dropped: list[str]  # request-file fields the server drops, sent anyway (--allow-dropped-fields)
    voice: Path | None = None  # the synthetic voice the built-in requests carry, where the server requires one
    voice_note: str = ""  # what the reports say of the reference voice

    @classmethod
    def open(
        cls,
        server: ServerOptions,
        *,
        deploy_file: Path | None = None,
        allow_foreign_deploy: bool = False,
        request_file: Path | None = None,
        allow_dropped_fields: bool = False,
        check_deploy: Callable[[DeployConfig | None], None] = lambda deploy: None,
    ) -> ServerSession:
        """The deploy file read (and `check_deploy`ed: what a command needs of it) before the server is
        asked anything; then the probe and the request set."""
        deploy = None
        if deploy_file is not None:  # its platform sections for CUDA, where vllm-omni serves
            deploy = load_deploy(deploy_file, "cuda", allow_foreign=allow_foreign_deploy)
        check_deploy(deploy)
        info = probe(server)
        if request_file is not None:
            requests, dropped = read_for_server(request_file, info, allow_dropped_fields)
        else:
            requests, dropped = builtin_requests(for_server=True), []
        return cls(server, deploy, deploy_file, info, requests, request_file, dropped)

    @property
    def deploy_seed(self) -> int | None:
        return self.deploy.default_seed if self.deploy is not None else None

    async def learn_voice(self, client: SpeechClient, workdir: Path, carried_by: str) -> None:
        """Whether the server requires a reference voice, from its answer to a short built-in request
        sent without one; where it does, the built-in requests get a synthetic 2 s voice written in
        `workdir` (`carried_by` names them in the note), and a request file's without one are an error."""
        asked = builtin_requests(for_server=True)[0]
        body = body_from_request(asked, model=self.server.model, response_format=self.server.response_format, seed=1)
        said = await voice_refusal(client, asked.id, body)
        if said is None:
            self.voice_note = VOICE_NOT_REQUIRED
            return
        refuse_unvoiced(said, self.requests, self.request_file)
        self.voice = default_voice(workdir)
        self.requests = with_voice(self.requests, self.voice)
        self.voice_note = f"required ({said}); {carried_by} carry a synthetic 2 s voice"


async def voice_refusal(client: SpeechClient, request: str, body: dict[str, Any]) -> str | None:
    """The server's words where it refuses `body` (a request without `ref_audio`) for want of a
    reference voice; None where it answers with audio. Any other refusal or failure is raised."""
    try:
        await client.speak(request, body | {"max_new_tokens": PROBE_FRAMES}, "reference-voice-check")
    except ServerError as e:
        if e.status != 400 or "ref_audio" not in e.message:
            raise
        return e.message.split(": HTTP 400 Bad Request: ")[-1]
    return None


def refuse_unvoiced(said: str, requests: list[Request], requests_file: Path | None) -> None:
    """Where the server requires a reference voice (`said`: its words), a request file's requests go
    as written, so one without `ref_audio` is an error naming its line; built-in requests (no file)
    are given a voice."""
    missing = [r for r in requests if r.ref_audio is None]
    if requests_file is not None and missing:
        raise MossError(
            f"the server requires a reference voice (it answers a request without one: {said!r}), and the "
            f"request(s) on line(s) {', '.join(str(r.line) for r in missing)} have no ref_audio",
            file=requests_file,
            line=missing[0].line,
            field="ref_audio",
        )
