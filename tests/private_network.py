"""Run the test session in a network namespace of its own, with loopback only, where Linux lets
this user make one (root, or unprivileged namespaces).

The servers the tests start bind 127.0.0.1, but a local Ray's GCS and raylet bind every
interface whatever they are told; in a private namespace every interface is loopback, so nothing
a test starts can be reached from another machine, and no test can reach past this one. Where no
namespace can be made (or MOSS_TEST_NETWORK=host), the tests run on the host's network as before.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess

CLONE_NEWNET = 0x40000000


def enter() -> str:
    """Move this process (its main thread, and every thread and child it starts from now on) into
    a new network namespace with loopback up; returns what happened, for the report header."""
    if os.environ.get("MOSS_TEST_NETWORK") == "host":
        return "host network (MOSS_TEST_NETWORK=host)"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        home = os.open("/proc/self/ns/net", os.O_RDONLY)
    except OSError as e:
        return f"host network (no network namespaces here: {e})"
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            return f"host network (unshare: {os.strerror(ctypes.get_errno())})"
        if _loopback_up():
            return "private network namespace: loopback only"
        libc.setns(home, CLONE_NEWNET)  # no working loopback in there: back to the host's network
        return "host network (loopback could not be brought up in a private namespace)"
    finally:
        os.close(home)


def _loopback_up() -> bool:
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True, timeout=10)
        with socket.create_server(("127.0.0.1", 0)) as server:
            socket.create_connection(server.getsockname(), timeout=5).close()
    except (OSError, subprocess.SubprocessError):
        return False
    return True
