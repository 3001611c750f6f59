"""A signal's exception that C code drops (soundfile's cffi callbacks print and ignore exceptions
raised in them) still stops the run: the next checkpoint, or the end of the block, raises it."""

import os
import signal
import time

import pytest

from moss_cli.interrupts import Interrupted, check_interrupted, interrupts_as_exceptions


def _swallowed_sigterm() -> None:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs here and raises
    except Interrupted:
        pass  # as a cffi callback drops it


def test_a_dropped_signal_is_raised_at_the_next_checkpoint():
    with interrupts_as_exceptions():
        _swallowed_sigterm()
        with pytest.raises(Interrupted) as stopped:
            check_interrupted()
    assert stopped.value.signum == signal.SIGTERM


def test_a_dropped_signal_is_raised_when_the_block_ends():
    with pytest.raises(Interrupted) as stopped:
        with interrupts_as_exceptions():
            _swallowed_sigterm()
    assert stopped.value.signum == signal.SIGTERM
    check_interrupted()  # outside the block nothing is pending


def test_without_a_signal_nothing_is_raised():
    with interrupts_as_exceptions():
        check_interrupted()
