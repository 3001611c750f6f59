"""The arms of `moss bench`: the same requests sent (or run) three ways, so the cost of determinism
can be read off side by side, on a server or on this machine's engine.

- `unseeded`: no seed. On vllm-omni 0.30.0 the residual sampler then draws from the process-wide RNG
  (worker/gpu_model_runner.py:1968-1979); after the deploy-seed fix it takes the deploy seed, as
  `moss serve` and moss's engine do. Locally, with no seed at all: the global RNG, shared by the batch.
- `seeded`: every request with an explicit seed (its own, else BENCH_SEED + its place in the set): every
  row has its own generator, which costs vllm-omni its CUDA graphs in the residual sampler.
- `deploy-seed`: every request with the deploy file's stage-0 seed sent explicitly, the seed the fix
  applies to unseeded requests: what turning the fix on costs, whatever the server runs.

A response that differs under load from the same request alone fails the run, whatever the arm: an
unseeded request that varies is not reproducible, whatever the cause (no stage-0 seed in the deploy
config, or a server without the fix; `--deploy` tells the two apart). With `--allow-unseeded`, an
unseeded one whose deploy seed is unknown (no `--deploy`, and the server does not report applying it)
is reported, not a failure. The bench cannot tell a request that varies alone from one that its batch
changes (`moss audit-determinism` does).
"""

from __future__ import annotations

from ..errors import MossError

ARMS = ("unseeded", "seeded", "deploy-seed")
BENCH_SEED = 1000  # the seeded arm: a request without a seed of its own gets BENCH_SEED + its index


def parse_arms(text: str) -> tuple[str, ...]:
    arms = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    unknown = [a for a in arms if a not in ARMS]
    if not arms or unknown:
        got = f"unknown arm {unknown[0]!r}" if unknown else "no arm"
        raise MossError(f"{got}; expected a comma-separated list of {', '.join(ARMS)}", field="--arms")
    return arms


def check_deploy_seed(arms: tuple[str, ...], deploy_seed: int | None, deploy_given: bool) -> None:
    """The deploy-seed arm sends the deploy file's stage-0 seed: it needs a file that gives one."""
    if "deploy-seed" in arms and deploy_seed is None:
        why = "the deploy file gives no stage-0 seed" if deploy_given else "it needs --deploy FILE"
        raise MossError(f"the deploy-seed arm sends the deploy file's stage-0 seed, but {why}", field="--arms")


def arm_seed(arm: str, own: int | None, index: int, deploy_seed: int | None) -> int | None:
    """The seed the arm sends (or runs) request number `index` of the set with, `own` its own seed;
    None: no seed."""
    if arm == "unseeded":
        return None
    if arm == "seeded":
        return own if own is not None else BENCH_SEED + index
    return deploy_seed


def must_hold(arm: str, deploy_seed_known: bool, allow_unseeded: bool) -> bool:
    """Whether a response of the arm that differs from the same request alone fails the run: always,
    but an unseeded one whose deploy seed is unknown where --allow-unseeded accepts it."""
    return arm != "unseeded" or deploy_seed_known or not allow_unseeded
