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


_received: list[int] = []  # the last signal a handler below turned into an exception
_pending: list[int] = []  # a signal whose exception may have been lost (see check_interrupted)


def as_interrupted(error: KeyboardInterrupt) -> KeyboardInterrupt:
    """`error` as the `Interrupted` of the signal that raised it: a library that catches the
    exception a signal handler raised (Ray's `ray.wait`) raises a bare KeyboardInterrupt instead,
    which would turn SIGTERM's exit code 143 into SIGINT's 130."""
    if isinstance(error, Interrupted) or not _received:
        return error
    return Interrupted(_received[-1])


def check_interrupted() -> None:
    """Raise the `Interrupted` of a signal whose exception never arrived. A handler's exception
    raised while C code runs Python (soundfile's cffi callbacks, as it encodes audio) is printed
    and dropped, so a run that writes many files calls this after each one; it runs only on the
    normal path, so a signal seen here is one whose exception was lost."""
    if _pending:
        signum = _pending[-1]
        _pending.clear()  # delivered now
        raise Interrupted(signum)


@contextmanager
def interrupts_as_exceptions():
    """SIGTERM (and SIGINT) raise `Interrupted`, so the run stops through the normal cleanup path."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _received[:] = [signum]
        _pending[:] = [signum]
        raise Interrupted(signum)

    _pending.clear()
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
        check_interrupted()  # the block ended normally although a signal came: its exception was lost
    finally:
        _pending.clear()
        for sig, old in previous.items():
            signal.signal(sig, old)
