"""Connecting to Ray and holding the workers for one run.

A placement group reserves every worker's CPUs and GPUs at once (all workers or none, spread over
the nodes when it can), one actor per bundle; Ray restarts a worker that dies, at most
`max_restarts` times, in its bundle. Before any work is sent, every worker has loaded its models
and reported its environment; workers whose environments differ would make a request's bits depend
on where it ran, which the batch-invariant mode refuses. Everything is released at the end.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import MossError
from ..interrupts import Interrupted, as_interrupted, interrupts_as_exceptions
from ..threads import default_threads, talker_parameters

INSTALL = "pip install 'moss-tts-repro[ray]'"


def import_ray():
    try:
        import ray
    except ImportError:
        raise MossError(f"--ray needs Ray, which is not installed: {INSTALL}", field="--ray") from None
    return ray


@dataclass(frozen=True)
class ClusterOptions:
    address: str | None = None  # auto, host:port or ray://...; None: RAY_ADDRESS, else a local Ray for the run
    workers: int | None = None  # None: one per `gpus_per_worker` GPUs of the cluster; 1 without GPUs
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    max_restarts: int = 2  # Ray restarts a dead worker this many times
    max_attempts: int = 3  # a request is sent to at most this many workers
    start_timeout_s: float = 900.0  # resources granted and models loaded

    def worker_device(self, device: str) -> str:
        """The device the workers run on (`--device` with the workers' resources)."""
        kind = str(device).split(":", 1)[0]
        if self.gpus_per_worker > 0:
            if kind == "cpu":
                raise MossError("--device cpu does not use the --gpus-per-worker GPUs", field="--device")
            return "npu" if kind == "npu" else "cuda"
        if kind in ("cuda", "npu"):
            raise MossError(f"--device {kind} on Ray needs --gpus-per-worker", field="--gpus-per-worker")
        return "cpu"

    def resources(self, device: str) -> dict[str, float]:
        """One worker's Ray resources (NPUs are Ray's `NPU` resource)."""
        accelerators = {"NPU" if device == "npu" else "GPU": self.gpus_per_worker} if self.gpus_per_worker else {}
        return {"CPU": self.cpus_per_worker, **accelerators}


def driver_options(options, cluster: ClusterOptions):
    """The options the driver validates and plans with: the workers' device (its deploy platform,
    its dtype for "auto"), which the driver never loads weights on."""
    import torch

    name = cluster.worker_device(options.device)
    try:
        device = torch.device(name)
    except RuntimeError:  # "npu" exists only once torch_npu is imported
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            raise MossError("NPU workers need torch_npu on the driver too (it plans with their device)") from None
        device = torch.device(name)
    return dataclasses.replace(options, device=device)


def worker_options(synth, cluster: ClusterOptions):
    """What each worker synthesises with: absolute paths (a worker's working folder is its own), its
    device, and the thread count a local run would choose (thread count changes bits on CPUs)."""
    options = synth.options

    def absolute(path: Path | None) -> Path | None:
        return None if path is None else Path(path).expanduser().resolve()

    cores = max(1, int(cluster.cpus_per_worker))
    return dataclasses.replace(
        options,
        device=cluster.worker_device(str(options.device)),
        threads=options.threads or default_threads(talker_parameters(synth.talker_config), cores),
        model=absolute(options.model),
        codec=absolute(options.codec),
        deploy=absolute(options.deploy),
    )


@contextmanager
def ray_session(cluster: ClusterOptions, on_event: Callable[[str], None] | None = None) -> Iterator["Session"]:
    """A Session for one command. SIGINT and SIGTERM end it through `Session.close` (no worker or
    local Ray outlives the run) with the signal's own exit code."""
    try:
        with interrupts_as_exceptions(), Session(cluster, on_event) as session:
            yield session
    except KeyboardInterrupt as e:
        raise as_interrupted(e) from None


class Session:
    """Ray for one run: joins a Ray this process already started (a notebook, the tests) and leaves
    it running; otherwise connects to `address` (or RAY_ADDRESS), or starts a single-node Ray on
    this machine for the run, and shuts it down at the end. Ray itself is imported when this is made."""

    def __init__(self, cluster: ClusterOptions, on_event: Callable[[str], None] | None = None) -> None:
        self.ray = import_ray()
        self.cluster = cluster
        self.on_event = on_event or (lambda message: None)
        self.started = False  # this session connected (or started a local Ray): it disconnects at the end
        self.where = "the Ray this process runs"
        self.workers: list = []
        self.group = None
        self.pids: list[int] = []  # the workers' processes as started (tests kill one)
        self.environment: dict = {}  # what every worker reported (the audit's report shows it)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        common = dict(log_to_driver=False, logging_level=logging.WARNING)
        sigterm = signal.getsignal(signal.SIGTERM)  # ray.init puts in its own, which exits without cleaning up
        address = self.cluster.address or os.environ.get("RAY_ADDRESS")
        self.started = True  # from here on: a signal in the middle of ray.init still shuts it down
        try:
            if address:
                ray.init(address=address, **common)
                self.where = f"the Ray cluster at {address}"
            else:
                self.where = "a local Ray started for this run"
                wanted = math.ceil((self.cluster.workers or 1) * self.cluster.cpus_per_worker)
                ray.init(
                    address="local",
                    num_cpus=max(os.cpu_count() or 1, wanted),
                    include_dashboard=False,
                    **common,
                )
        except ConnectionError as e:
            raise MossError(f"cannot reach the Ray cluster at {address}: {e}", field="--ray-address") from None
        except SystemExit as e:  # Ray's own SIGTERM handler, active while ray.init runs
            if e.code != signal.SIGTERM:
                raise
            raise Interrupted(signal.SIGTERM) from None
        finally:
            if sigterm is not None and signal.getsignal(signal.SIGTERM) is not sigterm:
                signal.signal(signal.SIGTERM, sigterm)

    def start(self, worker_class, options, device: str, batch_invariant: bool) -> list:
        """Start the workers and wait until each has loaded its models; returns their handles."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from .worker import WORKER_ENV

        ray = self.ray
        self.connect()
        bundle = self.cluster.resources(device)
        count = self._worker_count(bundle)
        each = ", ".join(f"{amount:g} {name}" for name, amount in bundle.items())
        self.on_event(f"starting {count} worker(s) on {self.where}, {each} each; they load the models first")
        self.group = placement_group([bundle] * count, strategy="SPREAD")
        ready, _ = ray.wait([self.group.ready()], timeout=self.cluster.start_timeout_s)
        if not ready:
            raise MossError(f"Ray did not grant {count} workers their resources in time (is the cluster busy?)")
        actor = ray.remote(worker_class)
        accelerators = {k: v for k, v in bundle.items() if k != "CPU"}
        self.workers = [
            actor.options(
                num_cpus=bundle["CPU"],
                num_gpus=accelerators.get("GPU", 0),
                resources={k: v for k, v in accelerators.items() if k != "GPU"},
                max_restarts=self.cluster.max_restarts,
                max_task_retries=0,  # a dead worker's requests go to the others (dispatch.py), not back to it
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=i),
                runtime_env={"env_vars": WORKER_ENV},
            ).remote(options)
            for i in range(count)
        ]
        try:
            infos = ray.get([w.ready.remote() for w in self.workers], timeout=self.cluster.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            limit = self.cluster.start_timeout_s
            raise MossError(f"the workers did not load their models within {limit:.0f} s", field="--ray") from None
        except ray.exceptions.RayTaskError as e:  # the worker's own error (e.g. its models would not load)
            raise (e.cause if isinstance(e.cause, BaseException) else e) from None
        except ray.exceptions.RayError as e:  # the worker process itself failed
            raise MossError(f"a Ray worker failed to start: {e}", field="--ray") from None
        self.pids = [info["pid"] for info in infos]
        self._check_environments([info["environment"] for info in infos], batch_invariant)
        return self.workers

    def _worker_count(self, bundle: dict[str, float]) -> int:
        total = self.ray.cluster_resources()
        count = self.cluster.workers
        if count is None:
            accelerator = next((k for k in bundle if k != "CPU"), None)
            count = max(1, int(total.get(accelerator, 0) // bundle[accelerator])) if accelerator else 1
        short = [f"{need * count:g} {k} (it has {total.get(k, 0):g})" for k, need in bundle.items()]
        if any(total.get(k, 0) < need * count for k, need in bundle.items()):
            raise MossError(
                f"{count} worker(s) need {', '.join(short)} on the Ray cluster; lower --workers or the "
                "per-worker resources",
                field="--workers",
            )
        return count

    def _check_environments(self, environments: list[dict], batch_invariant: bool) -> None:
        first = environments[0]
        differ = sorted({k for env in environments[1:] for k in first if env.get(k) != first[k]})
        self.environment = first
        if not differ:
            return
        detail = "; ".join(f"{k}: " + ", ".join(sorted({str(env.get(k)) for env in environments})) for k in differ)
        if batch_invariant:
            raise MossError(
                f"the workers differ ({detail}): a request's bits would depend on the worker it ran on",
                field="--ray",
            )
        self.on_event(f"the workers differ ({detail})")

    def close(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            for worker in self.workers:
                ray.kill(worker, no_restart=True)
            if self.group is not None:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.group)
        self.workers, self.group = [], None
        if self.started:
            ray.shutdown()
            self.started = False
