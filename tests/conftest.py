from __future__ import annotations

import shutil
from pathlib import Path

import private_network  # tests/ is on sys.path
import pytest
import torch

import moss_cli
from moss_cli.assets import TINY_CODEC, TINY_TALKER

# Tiny models on a busy 2-core box: one intra-op thread avoids OpenMP spin contention.
torch.set_num_threads(1)
NETWORK: list[str] = []


def pytest_configure(config) -> None:
    # Before any test starts a server or a thread: what they start inherits the namespace.
    NETWORK.append(private_network.enter())


def pytest_report_header(config) -> str:
    return f"network: {NETWORK[0] if NETWORK else 'host'}"


@pytest.fixture(scope="session")
def talker64():
    return moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="float64")


@pytest.fixture(scope="session")
def talker32():
    return moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def plain_talker():
    """The tiny talker with its weights left plain: weights packed for oneDNN cannot be compiled."""
    return moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="float32", pack=False)


@pytest.fixture(scope="session")
def codec():
    return moss_cli.load_codec(TINY_CODEC, device="cpu", dtype="float32")


@pytest.fixture
def talker_dir(tmp_path) -> Path:
    """A writable copy of the tiny talker checkpoint."""
    return Path(shutil.copytree(TINY_TALKER, tmp_path / "talker"))


@pytest.fixture
def codec_dir(tmp_path) -> Path:
    return Path(shutil.copytree(TINY_CODEC, tmp_path / "codec"))
