"""The findings cache as an untrusted input (hostile round five; docs/cache.md:
the trust model). Each case reproduces a failure of the round in one
command line, as a user runs it, in a cache folder of the test's own.

 1. `cache clear` never removes anything outside the cache: a `findings/`
    that is a link is refused (exit 2, nothing removed), and in `findings/`
    only the doctor's own entries go;
 2. a FIFO at the file-hash memo blocks nothing, and the bad memo is said on
    the doctor's own stderr;
 3. a job that read a file through a child process (`cat PATH`), or an
    environment variable outside the keyed list, is traced again when that
    changes; a shell command is never kept (and the findings say so); an
    unchanged re-check of the user's story (FlashInfer's `nvcc --version`
    probe through the emulated toolkit) still hits;
 4. a poisoned entry (a clean verdict written in, its inputs emptied) never
    passes the gate; a cache folder others can write or that is another
    user's, and a key others can read, are not used (one line says why);
 5. any file type, link or owner at any cache path: no data loss outside the
    cache, no hang, no stale pass (property tests).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import stat
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_cli

_TARGET = '''\
import os
import subprocess

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def target():
    # Read through a child process, as FlashInfer reads `nvcc --version`.
    mode = subprocess.run(["cat", os.path.join(HERE, "mode.txt")], capture_output=True, text=True).stdout.strip()
    extra = os.environ.get("HOSTILE_CACHE_EXTRA", "")
    if os.environ.get("HOSTILE_CACHE_SHELL"):
        os.system("true")

    def layer(x):
        # Read under Dynamo too: the recording of what the job reads is no break of its own.
        if mode == "break" or extra == "break" or os.environ.get("HOSTILE_CACHE_INNER") == "break":
            print("a break")
        return x + 1
    return layer, (torch.ones(4),)
'''


@pytest.fixture
def project(tmp_path) -> dict:
    root = tmp_path / "p"
    (root / "src" / "hcache_target").mkdir(parents=True)
    (root / "src" / "hcache_target" / "__init__.py").write_text("")
    (root / "src" / "hcache_target" / "model.py").write_text(_TARGET)
    (root / "src" / "hcache_target" / "mode.txt").write_text("clean\n")
    env = {"PYTHONPATH": os.pathsep.join([str(root / "src"), str(ROOT)]), "GRAPHBREAK_DOCTOR_CACHE": str(root / "cache"),
           "GRAPHBREAK_DOCTOR_NO_CACHE": "0"}
    return {"root": root, "env": env, "cache": root / "cache", "mode": root / "src" / "hcache_target" / "mode.txt"}


def _check(project: dict, *extra: str, env: dict | None = None, target: str = "hcache_target.model:target"):
    out = project["root"] / "f.json"
    out.unlink(missing_ok=True)
    proc = run_cli("check", "--target", target, "--mode", "fullgraph", "--json", str(out),
                   *(extra or ("--device", "cpu")), cwd=project["root"], env={**project["env"], **(env or {})})
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def _entries(project: dict) -> list[Path]:
    return sorted((project["cache"] / "findings").glob("*.json"))


# ------------------------------------------------------------- case 1

def test_case01_cache_clear_never_follows_findings_through_a_link(tmp_path):
    cache, precious = tmp_path / "c", tmp_path / "v"
    cache.mkdir(mode=0o700)
    precious.mkdir()
    (precious / "precious.json").write_text("{}")
    (precious / f"{'a' * 64}.json").write_text('{"format":"graphbreak-doctor findings cache"}')
    (cache / "findings").symlink_to(precious)
    proc = run_cli("cache", "clear", env={"GRAPHBREAK_DOCTOR_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "is a symbolic link: nothing was removed" in proc.stderr
    assert sorted(p.name for p in precious.iterdir()) == [f"{'a' * 64}.json", "precious.json"]


def test_case01_cache_clear_removes_only_the_doctors_own_entries(tmp_path):
    cache, outside = tmp_path / "c", tmp_path / "outside.json"
    (cache / "findings").mkdir(parents=True, mode=0o700)
    outside.write_text('{"format":"graphbreak-doctor findings cache"}')
    ours = cache / "findings" / f"{'b' * 64}.json"
    ours.write_text('{"format":"graphbreak-doctor findings cache","version":2}')
    kept = {
        "notes.json": '{"mine": 1}',  # not a name the doctor gives
        f"{'c' * 64}.json": '{"mine": 1}',  # the name of an entry, not an entry
    }
    for name, text in kept.items():
        (cache / "findings" / name).write_text(text)
    (cache / "findings" / f"{'d' * 64}.json").symlink_to(outside)  # a link named as an entry
    (cache / "file-hashes.json").symlink_to(outside)
    proc = run_cli("cache", "clear", env={"GRAPHBREAK_DOCTOR_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert "removed 1 entry" in proc.stdout
    assert not ours.exists() and outside.read_text().startswith('{"format"')
    assert sorted(p.name for p in (cache / "findings").iterdir()) == sorted([*kept, f"{'d' * 64}.json"])


# ------------------------------------------------------------- case 2

def test_case02_a_fifo_at_the_file_hash_memo_blocks_nothing(project):
    project["cache"].mkdir(mode=0o700)
    memo = project["cache"] / "file-hashes.json"
    os.mkfifo(memo)
    proc, findings = _check(project)
    assert proc.returncode == 0 and findings["cache"]["source"] == "traced"
    lines = [line for line in proc.stderr.splitlines() if "file-hash memo" in line]
    assert len(lines) == 1 and "not a regular file" in lines[0], proc.stderr  # on the doctor's own stderr
    assert stat.S_ISREG(os.lstat(memo).st_mode)  # rewritten whole
    assert _check(project)[1]["cache"]["source"] == "cache"


# ------------------------------------------------------------- case 3

def test_case03_a_file_read_through_a_child_process_is_an_input(project):
    proc, findings = _check(project)
    assert proc.returncode == 0 and findings["cache"]["source"] == "traced"
    (entry,) = _entries(project)
    children = json.loads(entry.read_text())["inputs"]["children"]
    assert any(c["argv"][:1] == ["cat"] and c["executable"].endswith("/cat") for c in children), children
    assert _check(project)[1]["cache"]["source"] == "cache"
    project["mode"].write_text("break\n")
    proc, findings = _check(project)
    assert findings["cache"]["source"] == "traced" and proc.returncode == 1, proc.stdout  # no stale pass
    assert "FAILED" in proc.stdout


def test_case03_an_environment_variable_read_outside_the_keyed_list_is_an_input(project):
    proc, findings = _check(project, env={"HOSTILE_CACHE_EXTRA": "clean"})
    assert proc.returncode == 0
    (entry,) = _entries(project)
    recorded = json.loads(entry.read_text())["inputs"]["environment"]
    assert recorded["HOSTILE_CACHE_EXTRA"] == hashlib.sha256(b"clean").hexdigest()  # the value is not kept
    assert _check(project, env={"HOSTILE_CACHE_EXTRA": "clean"})[1]["cache"]["source"] == "cache"
    proc, findings = _check(project, env={"HOSTILE_CACHE_EXTRA": "break"})
    assert findings["cache"]["source"] == "traced" and proc.returncode == 1


def test_case03_a_shell_command_is_never_kept_and_the_findings_say_so(project):
    proc, findings = _check(project, env={"HOSTILE_CACHE_SHELL": "1"})
    assert proc.returncode == 0
    assert findings["cache"]["not_kept"].startswith("not kept in the findings cache: a command ran through a shell")
    assert "traced; not kept in the findings cache" in proc.stdout
    assert _entries(project) == []
    assert _check(project, env={"HOSTILE_CACHE_SHELL": "1"})[1]["cache"]["source"] == "traced"


@pytest.mark.flashinfer
def test_case03_an_unchanged_recheck_of_the_users_story_still_hits(project):
    """FlashInfer's fp4_quantize on the emulated sm120: its `nvcc --version`
    runs the emulated toolkit in the run's own folder, keyed by content."""
    args = ("--device", "sm120")
    target = "fixtures.flashinfer_targets:fp4_quantize_wrapper"
    proc, findings = _check(project, *args, target=target)
    assert findings["cache"]["source"] == "traced" and proc.returncode == 1
    (entry,) = _entries(project)
    children = json.loads(entry.read_text())["inputs"]["children"]
    nvcc = [c for c in children if c["program"].endswith("nvcc")]
    assert nvcc and all(len(c["own"]) == 64 for c in nvcc), children  # the run's own tool, by its content
    again, cached = _check(project, *args, target=target)
    assert cached["cache"]["source"] == "cache" and again.returncode == 1


# ------------------------------------------------------------- case 4

def _poison(entry: Path, change) -> None:
    data = json.loads(entry.read_text())
    change(data)
    entry.write_text(json.dumps(data))


def _clean_verdict(data: dict) -> None:
    findings = data["outcome"]["findings"]
    findings["breaks"] = []
    findings["fullgraph"] = {**findings["fullgraph"], "ok": True, "error": "", "graph_count": 1}


@pytest.mark.parametrize("change", [_clean_verdict, lambda d: d["inputs"].update(files={}, listings={}, searched={})],
                         ids=["clean-verdict", "inputs-emptied"])
def test_case04_a_poisoned_entry_never_passes_the_gate(project, change):
    project["mode"].write_text("break\n")
    assert _check(project)[0].returncode == 1
    (entry,) = _entries(project)
    _poison(entry, change)
    proc, findings = _check(project)
    assert proc.returncode == 1 and findings["cache"]["source"] == "traced"
    assert "its signature does not match this user's cache key" in proc.stderr


def test_case04_a_signed_entry_that_records_no_input_is_not_used(project):
    from graphbreak_doctor.jobs import cache_trust

    project["mode"].write_text("break\n")
    _check(project)
    (entry,) = _entries(project)
    data = json.loads(entry.read_text())
    data["inputs"].update(files={}, listings={}, searched={})
    _clean_verdict(data)
    key = cache_trust._read_key(cache_trust.key_path())
    data["mac"] = cache_trust.sign(key, data["key"], data)
    entry.write_text(json.dumps(data))
    proc, findings = _check(project)
    assert proc.returncode == 1 and "it records no input" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root (CI runs as root)")
@pytest.mark.parametrize("make_unsafe, says", [
    (lambda c: os.chmod(c, 0o777), "can be written by every user"),
    (lambda c: os.chmod(c, 0o770), "can be written by its group"),
    (lambda c: os.chown(c, 12345, 12345), "belongs to another user (uid 12345)"),
    (lambda c: os.chmod(c / "findings", 0o777), "findings can be written by every user"),
], ids=["world-writable", "group-writable", "another-users", "findings-world-writable"])
def test_case04_a_cache_others_can_write_is_not_used(project, make_unsafe, says):
    assert _check(project)[1]["cache"]["source"] == "traced"
    make_unsafe(project["cache"])
    proc, findings = _check(project)
    assert findings["cache"]["source"] == "traced"
    lines = [line for line in proc.stderr.splitlines() if "findings cache is not used" in line]
    assert len(lines) == 1 and says in lines[0], proc.stderr
    (entry,) = _entries(project)
    before = entry.stat().st_mtime_ns
    _check(project)
    assert entry.stat().st_mtime_ns == before  # nothing written there either


def test_case04_a_key_others_can_read_is_not_used(project, tmp_path):
    key = tmp_path / "key" / "cache-key"
    env = {"GRAPHBREAK_DOCTOR_CACHE_KEY": str(key)}
    _check(project, env=env)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    os.chmod(key, 0o644)
    proc, findings = _check(project, env=env)
    assert findings["cache"]["source"] == "traced"
    assert "findings cache is not used: its key" in proc.stderr and "can be read by others" in proc.stderr


def test_case04_check_says_when_its_verdict_came_from_the_cache(project):
    _check(project)
    proc, _ = _check(project)
    assert "verdict from the findings cache (traced " in proc.stdout


# ------------------------------------------------------------- case 5

_KINDS = ("fifo", "link-to-outside-file", "link-to-outside-folder", "folder", "junk", "empty", "world-writable",
          "another-users", "genuine-cut-short")


@dataclasses.dataclass
class _Genuine:
    job: object
    key: str
    findings: dict


def _genuine_entry(cache: Path, source: Path) -> _Genuine:
    """A whole, signed entry (in this process) whose one input is ``source``."""
    from graphbreak_doctor.jobs import findings_cache, inputs
    from graphbreak_doctor.jobs.job import TRACE, Job, Outcome
    from graphbreak_doctor.targets.provider import Selection
    from hostile_material import make_findings

    job = Job(TRACE, Selection("factory", "t", {"spec": "app.model:target"}, spec="app.model:target"), "cpu",
              "fullgraph")
    manifest = {"files": {str(source): inputs.file_identity(str(source))}, "listings": {}, "searched": {},
                "versions": {}, "environment": {}, "children": [], "unknown": ""}
    findings = make_findings(2)
    key = findings_cache.pre_key(job, 0)
    findings_cache.store(job, key, Outcome(job, findings=findings, inputs=manifest, message="ok"), "",
                         findings_cache.trusted_secret())
    return _Genuine(job, key, {**findings.to_dict(), "cache": None})


def _tree(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        st_ = os.lstat(path)
        out[str(path.relative_to(folder))] = (path.read_text() if stat.S_ISREG(st_.st_mode) else
                                              f"mode {stat.S_IFMT(st_.st_mode):o}")
    return out


def _put(path: Path, kind: str, outside: Path) -> None:
    if os.path.lexists(path) and not path.is_dir():
        path.unlink()
    if kind == "fifo":
        if not path.is_dir():
            os.mkfifo(path)
    elif kind == "link-to-outside-file" and not path.is_dir():
        path.symlink_to(outside / "precious.json")
    elif kind == "link-to-outside-folder" and not path.is_dir():
        path.symlink_to(outside)
    elif kind == "folder" and not path.exists():
        path.mkdir()
    elif kind == "junk" and not path.is_dir():
        path.write_bytes(b"\x1b[2J{\"format\": \"graphbreak-doctor findings cache\"")
    elif kind == "empty" and not path.is_dir():
        path.write_bytes(b"")
    elif kind == "world-writable" and path.exists():
        os.chmod(path, 0o777)
    elif kind == "another-users" and path.exists() and os.geteuid() == 0:
        os.chown(path, 12345, 12345, follow_symlinks=False)
    elif kind == "genuine-cut-short" and path.is_file():
        path.write_bytes(path.read_bytes()[:100])


class _Hang(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Hang()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(["findings", "entry", "memo", "tmp", "root"]),
                                  st.sampled_from(_KINDS)), min_size=1, max_size=3))
def test_case05_any_file_at_any_cache_path_loses_nothing_hangs_nothing_passes_nothing_stale(tmp_path_factory,
                                                                                           changes):
    from graphbreak_doctor.jobs import cache_trust, findings_cache, hash_memo

    base = tmp_path_factory.mktemp("prop")
    cache, outside = base / "cache", base / "outside"
    outside.mkdir()
    (outside / "precious.json").write_text('{"format":"graphbreak-doctor findings cache"}')
    (outside / f"{'e' * 64}.json").write_text("keep")
    source = base / "source.py"
    source.write_text("x = 1\n")
    before = _tree(outside)
    saved = os.environ.get("GRAPHBREAK_DOCTOR_CACHE")
    os.environ["GRAPHBREAK_DOCTOR_CACHE"] = str(cache)
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        genuine = _genuine_entry(cache, source)
        paths = {"findings": cache / "findings", "entry": cache / "findings" / f"{genuine.key}.json",
                 "memo": cache / "file-hashes.json", "root": cache,
                 "tmp": cache / "findings" / f".{genuine.key}.json.1.abcdef01.tmp"}
        for where, kind in changes:
            _put(paths[where], kind, outside)
        signal.alarm(20)
        try:
            secret = findings_cache.trusted_secret()
            found = findings_cache.lookup(genuine.job, genuine.key, secret) if secret else None
            hash_memo.problem()
            hash_memo.load()
            try:
                findings_cache.clear()
            except cache_trust.Untrusted:
                pass  # refused, nothing removed: as `cache clear` says
        except _Hang:
            pytest.fail(f"hung on {changes}")
        finally:
            signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
        if saved is None:
            os.environ.pop("GRAPHBREAK_DOCTOR_CACHE", None)
        else:
            os.environ["GRAPHBREAK_DOCTOR_CACHE"] = saved
        for path in sorted(base.rglob("*"), reverse=True):  # what the test made another user's: back, to clean up
            if os.geteuid() == 0:
                os.chown(path, 0, 0, follow_symlinks=False)
    assert _tree(outside) == before, f"data outside the cache changed: {changes}"
    if found is not None:  # never another verdict than the one traced
        assert {**found.findings.to_dict(), "cache": None} == genuine.findings, changes


# ------------------------------------------------------------- case 6

def test_case06_matrix_environments_run_only_from_a_folder_no_one_else_can_write(tmp_path):
    """What else the cache folder holds is code the doctor runs: the matrix's
    environments (their interpreters) are used only from a folder no one
    else can write (the host builds of FlashInfer's planners, from such a
    folder only too, else built for the run alone: graphbreak_doctor/cache.py)."""
    envs = tmp_path / "envs"
    envs.mkdir()
    os.chmod(envs, 0o777)
    proc = run_cli("matrix", "--layer", "dense", "--impl", "reference", "--flashinfer", "0.7.4", "--envs", str(envs),
                   cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"{envs} can be written by every user" in proc.stderr
    assert list(envs.iterdir()) == []
