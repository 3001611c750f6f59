"""What one request actually runs with: its seed, sampling parameters and frame budget.

Precedence, per the deploy-seed fix: an explicit request seed (0 included) wins; otherwise the
deploy's stage-0 `default_sampling_params.seed`; otherwise none (the global RNG, not
reproducible). The deploy defaults are read as a copy and never modified.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sampling_params import STOP_HEAD_DEFAULTS, HeadSampling
from .deploy import DeployConfig
from .requests import Request


@dataclass(frozen=True)
class Effective:
    seed: int | None
    seed_source: str  # "request" | "deploy" | "none"
    audio: HeadSampling
    stop: HeadSampling
    do_sample: bool


def effective_seed(request_seed: int | None, deploy_seed: int | None) -> tuple[int | None, str]:
    if request_seed is not None:
        return request_seed, "request"
    if deploy_seed is not None:
        return deploy_seed, "deploy"
    return None, "none"


def effective(request: Request, deploy: DeployConfig) -> Effective:
    defaults = deploy.sampling  # a copy: overrides below never reach the shared defaults
    params = {**defaults, **request.sampling}
    temperature = float(params.get("temperature", 1.0))
    top_k = int(params.get("top_k", 0) or 0)
    audio = HeadSampling(
        temperature=temperature if temperature > 0 else 1.0,
        top_p=float(params.get("top_p", 1.0)),
        top_k=max(top_k, 0),
        repetition_penalty=float(params.get("repetition_penalty", 1.0)),
    )
    seed, source = effective_seed(request.seed, defaults.get("seed"))
    # temperature 0 means greedy, as in vLLM; the stop head then decodes greedily too.
    return Effective(seed, source, audio, STOP_HEAD_DEFAULTS, do_sample=temperature > 0)


def frame_budget(request: Request, deploy: DeployConfig, prompt_length: int) -> int:
    """max_new_frames, capped by the deploy's max_tokens and by what max_model_len leaves after the prompt."""
    budget = request.max_new_frames if request.max_new_frames is not None else deploy.max_tokens
    limits = [b for b in (budget, deploy.max_tokens) if b is not None]
    if deploy.max_model_len is not None:
        limits.append(deploy.max_model_len - prompt_length)
    return max(0, min(limits)) if limits else 4096
