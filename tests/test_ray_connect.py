"""``matrix --executor ray --address HOST:PORT`` where PORT answers, but not as
Ray: a bounded connect, one line and exit 2, and SIGTERM during the connect
keeps its documented exit (143, one line) -- ray.init would retry for many
minutes and replaces the SIGTERM handler. A real TCP server on loopback that
accepts every connection and answers garbage; the doctor in a process of its
own, as a user runs it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT

# A Ray cluster per module: the matrix stage runs these (make test-vllm-matrix), beside SGLang's.
pytestmark = pytest.mark.ray_cluster

ray = pytest.importorskip("ray", reason="Ray is an optional extra (requirements/ray.txt)")

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
# The bound on the whole command: the probe's deadline and the doctor's start, with room.
BOUND = 60


class GarbageServer:
    """Accepts on 127.0.0.1 and answers every connection with bytes that are
    no protocol's (Ray's GCS speaks gRPC over HTTP/2)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.accepted += 1
            self.connections.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        try:
            conn.sendall(b"HTTP/1.0 418 not Ray\r\n\r\n" + bytes(range(256)))
            while conn.recv(1 << 16):
                conn.sendall(b"\xff\x00garbage\r\n")
        except OSError:  # the doctor closed it
            return

    def close(self) -> None:
        self.listener.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture
def garbage():
    server = GarbageServer()
    yield server
    server.close()


def _matrix(port: int, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "graphbreak_doctor", "matrix", "--layer", "dense", "--impl",
                             "reference", "--executor", "ray", "--address", f"127.0.0.1:{port}"],
                            cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_an_address_that_is_not_ray_is_one_line_exit_2_within_a_bound(garbage, tmp_path):
    started = time.monotonic()
    proc = _matrix(garbage.port, tmp_path)
    try:
        _out, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
        proc.communicate()
    assert time.monotonic() - started < BOUND
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"graphbreak-doctor: error: no Ray cluster answers at 127.0.0.1:{garbage.port}: "), err
    assert garbage.accepted >= 2, "the doctor never tried Ray's own connect"
    assert not any(tmp_path.iterdir())


def test_sigterm_while_connecting_is_one_line_143(garbage, tmp_path):
    proc = _matrix(garbage.port, tmp_path)
    try:
        # The doctor's reachability check connected; what follows is the
        # connect of Ray's client, which takes longer than this wait.
        deadline = time.monotonic() + BOUND
        while not garbage.accepted and proc.poll() is None:
            assert time.monotonic() < deadline, "the doctor never connected to the address"
            time.sleep(0.05)
        time.sleep(3)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 143, err
    assert err.strip() == "graphbreak-doctor: interrupted: SIGTERM received; stopped, nothing written", err
    assert not any(tmp_path.iterdir())
