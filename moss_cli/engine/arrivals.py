"""Requests that arrive while the engine runs: a server's HTTP handlers `put` them from their
threads, the engine's loop takes them between steps (see `Engine.events`)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, Iterator, TypeVar

T = TypeVar("T")


class Arrivals(Generic[T]):
    """An endless request source: iterating yields each arrival once, in arrival order, or None
    when nothing is waiting (the engine then keeps decoding); it ends after `close()` once every
    arrival has been taken."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._closed = False
        self._ready = threading.Condition()

    def put(self, item: T) -> None:
        with self._ready:
            if self._closed:
                raise RuntimeError("the engine takes no more requests")
            self._items.append(item)
            self._ready.notify_all()

    def close(self) -> None:
        """No more arrivals: the engine finishes what it has, then its loop ends."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def __len__(self) -> int:
        """Arrivals the engine has not taken yet."""
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def wait(self, timeout: float | None = None) -> None:
        """Block until an arrival is waiting or the source is closed (the engine is idle)."""
        with self._ready:
            self._ready.wait_for(lambda: self._items or self._closed, timeout)

    def __iter__(self) -> Iterator[T | None]:
        while True:
            with self._ready:
                if self._items:
                    item: T | None = self._items.popleft()
                elif self._closed:
                    return
                else:
                    item = None
            yield item
