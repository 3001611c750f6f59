"""Handing tasks to the workers and taking their results as they finish.

Ray schedules the workers, moves the requests and results, notices a worker that dies (its calls
fail with `RayActorError`) and restarts it (`max_restarts`). What is added here: each worker has
at most `capacity` tasks in flight and the least loaded one takes the next task (so a faster or
emptier worker gets more), and a task whose worker died is sent to another live worker, at most
`max_attempts` times in all. Each task has one call in flight at a time, so its result is
delivered once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..errors import MossError


@dataclass
class Task:
    key: str
    submit: Callable[[Any], Any]  # worker handle -> the ObjectRef of its call
    attempts: int = 0


@dataclass
class Delivery:
    task: Task
    value: Any
    worker: int  # index of the worker that delivered it


class VoiceBytes:
    """Reference voices travel to the workers as bytes in Ray's object store, put once per content,
    so only the checkpoints need a path every node can read."""

    def __init__(self, ray) -> None:
        self.ray = ray
        self.refs: dict[str, Any] = {}  # file content hash -> ObjectRef of the bytes

    def __call__(self, p) -> Any:
        """The ObjectRef of `p`'s reference voice (a pipeline `Prepared`), or None without one."""
        if p.reference is None:
            return None
        if p.reference.sha256 not in self.refs:
            self.refs[p.reference.sha256] = self.ray.put(Path(p.reference.path).read_bytes())
        return self.refs[p.reference.sha256]

    def of(self, prepared: list) -> dict[str, Any]:
        """By request id, for the requests of an engine run that have a voice."""
        return {p.request.id: self(p) for p in prepared if p.reference is not None}


def remote_error(ray, error: Exception) -> BaseException:
    """The exception a worker raised (a MossError stays a MossError), without Ray's wrapping."""
    if isinstance(error, ray.exceptions.RayTaskError) and isinstance(error.cause, BaseException):
        return error.cause
    return error


class Dispatcher:
    def __init__(
        self,
        ray,
        workers: list,
        *,
        capacity: int,
        max_attempts: int,
        environment: dict | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.ray, self.workers, self.capacity, self.max_attempts = ray, workers, capacity, max_attempts
        self.environment = environment  # what a restarted worker must report again to rejoin
        self.on_event = on_event or (lambda message: None)
        self.state = ["up"] * len(workers)  # up | restarting (Ray is restarting it) | dead
        self.load = [0] * len(workers)
        self.resent = 0  # tasks sent again because their worker died

    def run(self, tasks: Iterable[Task]) -> Iterator[Delivery]:
        """Every task's result, in the order they finish."""
        ray = self.ray
        source, retry = iter(tasks), deque()
        inflight: dict[Any, tuple[Task, int]] = {}
        pings: dict[Any, int] = {}  # a restarting worker's `ready` call: it rejoins when that returns
        exhausted = False
        while True:
            while True:
                idle = [i for i, s in enumerate(self.state) if s == "up" and self.load[i] < self.capacity]
                if not idle:
                    break
                task = retry.popleft() if retry else None
                if task is None and not exhausted:
                    task = next(source, None)
                    exhausted = task is None
                if task is None:
                    break
                worker = min(idle, key=lambda i: self.load[i])
                inflight[task.submit(self.workers[worker])] = (task, worker)
                self.load[worker] += 1
            if not inflight:
                if exhausted and not retry:
                    return
                if not pings:
                    raise MossError(
                        f"every worker has died; {len(retry)} task(s) unfinished (finished outputs are kept: "
                        "run the same command again to resume)",
                        field="--ray",
                    )
            ready, _ = ray.wait([*inflight, *pings], num_returns=1)
            ref = ready[0]
            if ref in pings:
                self._rejoin(pings.pop(ref), ref)
                continue
            task, worker = inflight.pop(ref)
            self.load[worker] -= 1
            try:
                value = ray.get(ref)
            except ray.exceptions.RayActorError:
                if self.state[worker] == "up":
                    self.state[worker] = "restarting"
                    pings[self.workers[worker].ready.remote()] = worker
                    self.on_event(f"worker {worker} died; its unfinished work goes to the other workers")
                retry.append(self._again(task))
                continue
            except ray.exceptions.RayError as e:
                raise remote_error(ray, e) from None
            yield Delivery(task, value, worker)

    def _again(self, task: Task) -> Task:
        task.attempts += 1
        self.resent += 1
        if task.attempts >= self.max_attempts:
            raise MossError(
                f"{task.key} was in flight on {task.attempts} workers that died; it may be what kills them "
                "(finished outputs are kept)",
                field="--ray",
            )
        return task

    def _rejoin(self, worker: int, ping) -> None:
        try:
            info = self.ray.get(ping)
        except self.ray.exceptions.RayError:
            self.state[worker] = "dead"  # Ray gave up restarting it (max_restarts)
            self.on_event(f"worker {worker} is gone for good")
            return
        if self.environment is not None and info["environment"] != self.environment:
            self.state[worker] = "dead"  # restarted somewhere that computes differently
            self.on_event(f"worker {worker} restarted on a node that differs from the others; it takes no work")
            return
        self.state[worker] = "up"
        self.on_event(f"worker {worker} restarted and takes work again")
