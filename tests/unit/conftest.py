"""tests/unit tests each piece alone: no checkpoint's weights are read here (a test that needs them
belongs in tests/integration). Configs, tokenizers and in-memory random models are fine. The guard
wraps each unit test's set-up (session fixtures such as `talker32` included) and its call."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from moss_cli.model import checkpoint


def _refuse(*args, **kwargs):
    raise AssertionError("a test in tests/unit read a checkpoint's weights: move it to tests/integration")


@contextmanager
def _no_weights():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "safe_open", _refuse)
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with _no_weights():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _no_weights():
        yield
