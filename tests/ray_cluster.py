"""A real Ray cluster on this machine, for the Ray executor's tests and its
benchmark: a head node and more nodes, started with Ray's own ``ray start``
from this interpreter's environment, all in a network namespace of their own
that has only loopback.

Outside such a namespace Ray binds to the machine's network address and
probes outside addresses to find it; inside it the nodes' address is
127.0.0.1 and nothing leaves the machine. Usage statistics and the dashboard
are off. Making a namespace takes root (``ip netns``); :class:`NoNamespace`
says why it could not be made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
# What every process in the namespace runs with: this checkout importable (Ray's
# workers import the doctor), no usage statistics.
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}


class NoNamespace(Exception):
    pass


def in_ns(ns: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *command], env=ENV, text=True, capture_output=True,
                          check=False, timeout=timeout)


def popen_in_ns(ns: str, *command: str, cwd: Path) -> subprocess.Popen:
    """``command`` started in the namespace (``ip netns exec`` execs it: the
    returned process is the command itself)."""
    return subprocess.Popen(["ip", "netns", "exec", ns, *command], cwd=cwd, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@contextlib.contextmanager
def loopback_cluster(nodes: int = 2, cpus: int = 1, port: int = 6380) -> Iterator[tuple[str, str]]:
    """(namespace, address) of a running cluster of ``nodes`` nodes with
    ``cpus`` CPUs each; stopped and removed afterwards."""
    ns = f"gbd-ray-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True, check=False) \
        if shutil.which("ip") else None
    if made is None or made.returncode != 0:
        raise NoNamespace("no `ip` command" if made is None else made.stderr.strip())
    temp = f"/tmp/{ns}"  # Ray's session folder: short, for its socket paths
    common = ["--num-cpus", str(cpus), "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    try:
        in_ns(ns, "ip", "link", "set", "lo", "up")
        started = in_ns(ns, str(RAY), "start", "--head", "--port", str(port), "--include-dashboard", "false",
                        "--temp-dir", temp, *common)
        if started.returncode != 0:
            raise RuntimeError(f"ray start --head: {started.stderr[-2000:]}")
        for _ in range(nodes - 1):
            started = in_ns(ns, str(RAY), "start", "--address", f"127.0.0.1:{port}", *common)
            if started.returncode != 0:
                raise RuntimeError(f"ray start --address: {started.stderr[-2000:]}")
        yield ns, f"127.0.0.1:{port}"
    finally:
        in_ns(ns, str(RAY), "stop", "--force")
        subprocess.run(["ip", "netns", "delete", ns], check=False)
        shutil.rmtree(temp, ignore_errors=True)
