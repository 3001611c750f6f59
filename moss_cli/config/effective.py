"""What one request actually runs with: its seed, sampling parameters and frame budget.

Precedence, per the deploy-seed fix: an explicit request seed (0 included) wins; otherwise the
deploy's stage-0 `default_sampling_params.seed`; otherwise none (the global RNG, not
reproducible). The deploy defaults are read as a copy and never modified.

The audio sampler and the stop gate sample what a vllm-omni MOSS-TTS-Local deployment samples
(`AUDIO_DEFAULTS`, `STOP_HEAD_DEFAULTS`), whatever stage 0's temperature, top_p, top_k and
repetition_penalty say: vllm-omni does not apply them to the audio. A request's `audio_*` fields
(a moss extension for local runs) override the audio sampler; `audio_temperature` 0 is greedy.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS, HeadSampling
from .deploy_config import DeployConfig
from .requests import Request


class SeedSource(str, Enum):
    """Where a request's seed came from: the manifest's `seed_source`, moss serve's
    x-moss-seed-source and the reports' value (each the member's string)."""

    REQUEST = "request"  # its own seed (0 included)
    DEPLOY = "deploy"  # the deploy's stage-0 default seed
    NONE = "none"  # neither: an unseeded draw, not reproducible
    GLOBAL = "global"  # --legacy-global-rng: the run's one global stream
    UNKNOWN = "unknown"  # a server that does not say, for a request sent without a seed
    SERVER = "server"  # a --server dry run: the server will decide, for a request without a seed

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Effective:
    seed: int | None
    seed_source: SeedSource  # REQUEST, DEPLOY or NONE (GLOBAL in the legacy mode)
    audio: HeadSampling
    stop: HeadSampling
    do_sample: bool


def effective_seed(request_seed: int | None, deploy_seed: int | None) -> tuple[int | None, SeedSource]:
    if request_seed is not None:
        return request_seed, SeedSource.REQUEST
    if deploy_seed is not None:
        return deploy_seed, SeedSource.DEPLOY
    return None, SeedSource.NONE


def effective(request: Request, deploy: DeployConfig) -> Effective:
    given = request.sampling
    temperature = float(given.get("audio_temperature", AUDIO_DEFAULTS.temperature))
    audio = HeadSampling(
        temperature=temperature if temperature > 0 else AUDIO_DEFAULTS.temperature,
        top_p=float(given.get("audio_top_p", AUDIO_DEFAULTS.top_p)),
        top_k=int(given.get("audio_top_k", AUDIO_DEFAULTS.top_k)),
        repetition_penalty=float(given.get("audio_repetition_penalty", AUDIO_DEFAULTS.repetition_penalty)),
    )
    seed, source = effective_seed(request.seed, deploy.default_seed)
    # audio_temperature 0 means greedy, as temperature 0 does in vLLM; the stop gate then decodes greedily too.
    return Effective(seed, source, audio, STOP_HEAD_DEFAULTS, do_sample=temperature > 0)


def frame_budget(request: Request, deploy: DeployConfig, prompt_length: int) -> int:
    """The request's max_new_frames, else the deploy's max_tokens, within what max_model_len leaves after
    the prompt. A request's value replaces max_tokens, larger or smaller, as vllm-omni 0.30.0 replaces stage
    0's max_tokens by a request's max_new_tokens (entrypoints/openai/tts_adapters/moss_tts.py:500,
    tts_adapters/base.py:108-120)."""
    budget = request.max_new_frames if request.max_new_frames is not None else deploy.max_tokens
    limits = [budget] if budget is not None else []
    if deploy.max_model_len is not None:
        limits.append(deploy.max_model_len - prompt_length)
    return max(0, min(limits)) if limits else 4096
