"""The suite runs where only loopback exists (where a namespace can be made): what the tests
start, a local Ray that binds every interface included, is reachable from this machine alone."""

import socket

import pytest
from conftest import NETWORK


def test_the_tests_see_no_network_interface_but_loopback():
    if not NETWORK or not NETWORK[0].startswith("private"):
        pytest.skip(f"no private network namespace here: {NETWORK[0] if NETWORK else 'not entered'}")
    assert [name for _, name in socket.if_nameindex()] == ["lo"]
    with socket.create_server(("127.0.0.1", 0)) as server:  # and loopback works
        socket.create_connection(server.getsockname(), timeout=5).close()


def test_the_readme_test_command_shows_the_network_in_pytests_header():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", __file__]
    shown = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120).stdout
    assert "network: " in shown.split("collected")[0], shown[-2000:]
