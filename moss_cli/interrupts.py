"""SIGINT and SIGTERM as exceptions, so a long run stops through its normal cleanup path
(temporary files removed, a partial manifest written) and exits 130 / 143."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM; `signum` gives the exit code 128 + signum."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


@contextmanager
def interrupts_as_exceptions():
    """SIGTERM (and SIGINT) raise `Interrupted`, so the run stops through the normal cleanup path."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
