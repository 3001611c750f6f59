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
