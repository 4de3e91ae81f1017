"""The Ray executor (``matrix --executor ray [--address ADDR]``): each job a
Ray task, placed by Ray on a node of a running cluster.

The task builds or reuses the job's environment on its node -- in that node's
cache folder (or ``--envs``, the same path on every node), keyed as locally --
and runs the job there in a worker process of the doctor's own, with the same
time and memory limits as locally (executors/local.py); the outcome comes back
to the driver, which renders the table as for a local run. Every node runs the
doctor from the same checkout or install (start Ray with the doctor's Python:
``ray start`` from its environment) and has uv, as for a local matrix.

Faults: a task whose Ray worker or node is lost (killed, out of memory, the
node gone) is run once more; lost again, its cell reads ``crashed: Ray worker
lost (<reason>)``, and the other cells go on. A retried cell says so. Ctrl-C
(or SIGTERM) cancels every task still running or waiting -- Ray kills their
workers, and the doctor's worker processes die with them (jobs/lifetime.py)
-- and nothing is written.

The address: ``--address``, else ``RAY_ADDRESS``, else the cluster running on
this machine (Ray's own discovery); no cluster there is one line, exit 2. So
is an address that answers but not as Ray (ray.init would retry for many
minutes, deaf to signals): before ray.init, Ray's own GCS client connects
once, with a deadline, in a process of its own that Ctrl-C or SIGTERM stops
at once. ray.init replaces the SIGTERM handler (with ``sys.exit``): the
doctor's is put back when it returns, and a SIGTERM during it is an
interruption as anywhere else (143, one line).
What Ray itself prints in the driver (its warnings, the raylet's reports of
workers that died) goes to the matrix's log, not the terminal.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from graphbreak_doctor.jobs.job import Interrupted
from graphbreak_doctor.matrix.executors import ExecutorError, Limits, Progress, Ran, Work
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.text import one_line

# How long the driver waits for a cluster's address to answer before saying
# none is reachable (Ray itself retries for minutes).
CONNECT_TIMEOUT = 5.0
# How long the address may take to answer as a Ray cluster (Ray's GCS client
# gives up on its own after about 10 s more: a connect and a subscription of
# 5 s each); the probe process is killed past ANSWER_DEADLINE.
ANSWER_TIMEOUT = 10.0
ANSWER_DEADLINE = 40.0
# Attempts per task: the first, and one more after a lost worker or node.
ATTEMPTS = 2
_POLL = 0.5  # seconds between looks at the tasks (signals are handled between them)
NAMESPACE = "graphbreak-doctor"


class Executor:
    name = "ray"

    def __init__(self, address: str | None = None, envs: str | None = None,
                 find_links: tuple[str, ...] = ()) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ExecutorError("--executor ray needs Ray: pip install 'graphbreak-doctor[ray]'") from None
        self.address = address or os.environ.get("RAY_ADDRESS") or "auto"
        self.envs = envs
        self.find_links = tuple(find_links)
        self.log = ""  # what Ray printed in the driver, once the executor is closed
        self._undo: UndoLog | None = None
        self._folder = ""
        self.cluster = ""

    def describe(self) -> str:
        return self.cluster or f"the Ray cluster at {self.address}"

    def __enter__(self) -> Executor:
        import ray

        from graphbreak_doctor.jobs.output import to_log

        self._undo = undo = UndoLog()
        self._folder = tempfile.mkdtemp(prefix="graphbreak-doctor-ray-")
        try:
            # Ray's driver prints to stdout and stderr (C++ warnings, the
            # raylet's reports): to the log until the executor closes.
            to_log(os.path.join(self._folder, "ray.log"), undo)
            bootstrap = _bootstrap(self.address)
            if bootstrap:
                _answers_as_ray(bootstrap)
            try:
                _init(ray, address=self.address, namespace=NAMESPACE, log_to_driver=False,
                      logging_level=logging.WARNING)
            except ConnectionError as e:
                raise ExecutorError(f"no Ray cluster reachable at {bootstrap or self.address}: {one_line(str(e))}") \
                    from None
            undo.call_on_undo(ray.shutdown)
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            cpus = int(ray.cluster_resources().get("CPU", 0))
            self.cluster = (f"the Ray cluster at {bootstrap or self.address} "
                            f"({len(nodes)} node{'s' if len(nodes) != 1 else ''}, {cpus} CPUs)")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        from graphbreak_doctor.jobs.output import read_log

        if self._undo is not None:
            self._undo.undo()
            self._undo = None
        if self._folder:
            self.log = read_log(os.path.join(self._folder, "ray.log"))
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = ""

    def run(self, work: list[Work], environments, limits: Limits, progress: Progress) -> list[Ran]:
        import ray

        task = _task()
        progress(f"tracing: {len(work)} Ray tasks on {self.describe()}")
        ran: list[Ran | None] = [None] * len(work)
        lost: list[str] = [""] * len(work)
        attempts = [0] * len(work)
        pending: dict = {}

        def submit(i: int) -> None:
            attempts[i] += 1
            w = work[i]
            name = f"graphbreak-doctor {w.spec.label}, {w.job.device}, {w.job.kind} {w.job.mode}"
            ref = task.options(name=name).remote(w, self.envs, self.find_links, limits, os.getcwd())
            pending[ref] = i

        with UndoLog() as undo:
            received = _note_signals(undo)
            for i in range(len(work)):
                submit(i)
            try:
                while pending:
                    if received:
                        raise Interrupted(received[0])
                    done, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL)
                    for ref in done:
                        i = pending.pop(ref)
                        try:
                            ran[i] = ray.get(ref)
                        except ray.exceptions.RayError as e:
                            reason = _lost(e)
                            if reason and attempts[i] < ATTEMPTS:
                                lost[i] = f"Ray worker lost ({reason})"
                                progress(f"{lost[i]} running {work[i].job.describe()}: once more")
                                submit(i)
                                continue
                            ran[i] = _failed(work[i], e, reason)
                        ran[i].retried = lost[i]
            except BaseException:  # Ctrl-C, SIGTERM: the tasks still out are stopped, nothing is kept
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
        return [r for r in ran if r is not None]


def _note_signals(undo: UndoLog) -> list[int]:
    """SIGINT and SIGTERM noted, not raised, until ``undo`` is undone: the
    driver's loop raises Interrupted between its waits (at most _POLL later).
    An exception raised by a handler while Ray's own C++ code waits comes out
    as a SystemError; and SIGINT is caught even where the doctor started with
    it ignored (a background job of a script), as the local worker pool does."""
    received: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.signal(signum, lambda number, _frame: received.append(number))
        undo.call_on_undo(lambda signum=signum, previous=previous: signal.signal(signum, previous))
    return received


def _bootstrap(address: str) -> str:
    """The cluster's host:port that ``address`` names ("auto": RAY_ADDRESS or
    the cluster running here, as Ray finds it), checked to answer within
    CONNECT_TIMEOUT; "" when Ray cannot say it (ray.init then reports itself)."""
    found = address.removeprefix("ray://")
    if found == "auto":
        try:
            from ray._private import services  # Ray's own reading of "auto"
        except ImportError:  # a Ray without it: ray.init reads the address and reports itself
            return ""
        try:
            found = services.canonicalize_bootstrap_address(found)
        except (ValueError, ConnectionError) as e:
            raise ExecutorError(f"no Ray cluster found: {one_line(str(e))}") from None
        if found is None:
            raise ExecutorError("no Ray cluster found: none runs on this machine and RAY_ADDRESS is not set "
                                "(start one with `ray start --head`, or give --address)")
    host, _, port = found.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"--address: expected HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        raise ExecutorError(f"no Ray cluster reachable at {found}: {e.strerror or type(e).__name__}") from None
    return found


# Connects Ray's GCS client once: python -c PROBE HOST:PORT TIMEOUT_MS; the
# error, if any, on stdout (stderr carries Ray's own warnings).
_PROBE = (
    "import sys\n"
    "from ray import _raylet\n"
    "standalone = getattr(getattr(_raylet, 'InnerGcsClient', None), 'standalone', None)\n"
    "try:\n"
    "    if standalone is not None:\n"
    "        standalone(sys.argv[1], None, int(sys.argv[2]))\n"
    "    else:  # a Ray without it: its client, with Ray's own timeout\n"
    "        _raylet.GcsClient(address=sys.argv[1])\n"
    "except Exception as e:\n"
    "    print(f'{type(e).__name__}: {e}', flush=True)\n"
    "    sys.exit(1)\n"
)


def _answers_as_ray(found: str) -> None:
    """Check that ``found`` (host:port, which accepts connections) answers as
    a Ray cluster: Ray's GCS client connects within ANSWER_TIMEOUT, in a
    process of its own (killed past ANSWER_DEADLINE, or when a signal stops
    the doctor meanwhile)."""
    from graphbreak_doctor.jobs import lifetime

    probe = subprocess.Popen(lifetime.command([sys.executable, "-c", _PROBE, found, str(int(ANSWER_TIMEOUT * 1000))]),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + ANSWER_DEADLINE
    try:
        while probe.poll() is None and time.monotonic() < deadline:
            time.sleep(_POLL / 5)  # where SIGINT and SIGTERM reach the doctor
    finally:
        if probe.poll() is None:
            probe.kill()
        said = probe.communicate()[0]
    if probe.returncode == 0:
        return
    why = one_line(said.strip().splitlines()[-1]) if said.strip() else f"no answer within {ANSWER_DEADLINE:g} s"
    raise ExecutorError(f"no Ray cluster answers at {found}: {why}")


def _init(ray, **options) -> None:
    """ray.init, with the doctor's SIGTERM handler put back when it returns (Ray
    sets one that calls sys.exit); a SIGTERM meanwhile is Interrupted."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(**options)
    except SystemExit as e:
        if e.code != signal.SIGTERM or signal.getsignal(signal.SIGTERM) is previous:
            raise
        raise Interrupted(signal.SIGTERM) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _lost(e: Exception) -> str:
    """Why a task's worker or node was lost ("" when the task itself failed)."""
    import ray.exceptions as rx

    if not isinstance(e, (rx.WorkerCrashedError, rx.NodeDiedError, rx.OutOfMemoryError, rx.LocalRayletDiedError,
                          rx.ObjectLostError)):
        return ""
    first = one_line(str(e)).split(". ", 1)[0].rstrip(".")
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _failed(w: Work, e: Exception, lost: str) -> Ran:
    """A job that gave no outcome: its worker lost twice, or the task failed."""
    import ray.exceptions as rx

    from graphbreak_doctor.model import CRASHED
    from graphbreak_doctor.jobs.job import Outcome

    if lost:
        message = f"Ray worker lost ({lost})"
    elif isinstance(e, rx.RayTaskError):  # the doctor's own code raised on the node
        cause = e.cause if isinstance(e.cause, BaseException) else e
        message = f"internal error in the Ray task: {type(cause).__name__}: {one_line(str(cause))}"
    else:
        message = f"Ray could not run the task: {type(e).__name__}: {one_line(str(e))}"
    return Ran(Outcome(w.job, status=CRASHED, message=message), host="")


@functools.cache
def _task():
    import ray

    # Retries are the driver's (once, after a lost worker or node), so that the table can say so.
    return ray.remote(num_cpus=1, max_retries=0)(run_on_node)


def run_on_node(w: Work, envs: str | None, find_links: tuple[str, ...], limits: Limits, cwd: str) -> Ran:
    """One job on the node Ray chose: its environment built or reused in the
    node's cache folder (or ``envs``), the job in a worker process there --
    in the driver's current folder ``cwd`` where the node has it, so that the
    findings show file paths as a local run does."""
    from graphbreak_doctor.matrix.envs import Environments, EnvError, default_envs_dir
    from graphbreak_doctor.matrix.executors.local import run_in_envs

    try:
        environments = Environments(Path(envs) if envs else default_envs_dir(), list(find_links))
    except EnvError as e:
        return Ran(None, unbuilt=f"cannot build environments on {socket.gethostname()}: {e}")
    if os.path.isdir(cwd):
        w = replace(w, job=replace(w.job, cwd=cwd))
    [ran] = run_in_envs([w], environments, Limits(jobs=1, timeout=limits.timeout, memory=limits.memory))
    return ran
