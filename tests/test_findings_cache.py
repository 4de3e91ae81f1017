"""The findings cache (graphbreak_doctor/jobs/findings_cache.py, jobs/inputs.py;
docs/cache.md): an unchanged job's findings are read back, and every change
to what its trace read -- a helper module Dynamo never traces, a library the
target calls, an environment variable, a distribution's version -- traces it
again. Real runs of the command line, as a user runs it (workers: the cache
is theirs), in a cache folder of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

TARGET = "fcache_target.model:target"

_MODEL = '''\
import torch

from fcache_target import helper  # imported, never traced
import fcache_lib


def layer(x):
    y = fcache_lib.double(x)
    print("traced now")  # a break Dynamo reports (logging)
    return y + 1


def target():
    return layer, (torch.ones(4),)
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> dict:
    """A target package and a 'library' package of the test's own (each on
    PYTHONPATH), the cache folder, and the environment the runs use."""
    root = tmp_path_factory.mktemp("fcache")
    (root / "src" / "fcache_target").mkdir(parents=True)
    (root / "src" / "fcache_target" / "__init__.py").write_text("")
    (root / "src" / "fcache_target" / "model.py").write_text(_MODEL)
    (root / "src" / "fcache_target" / "helper.py").write_text('NOTE = "a helper module"\n')
    (root / "lib" / "fcache_lib").mkdir(parents=True)
    (root / "lib" / "fcache_lib" / "__init__.py").write_text("def double(x):\n    return x * 2\n")
    env = {"PYTHONPATH": os.pathsep.join([str(root / "src"), str(root / "lib"), str(ROOT)]),
           "GRAPHBREAK_DOCTOR_CACHE": str(root / "cache"), "GRAPHBREAK_DOCTOR_NO_CACHE": "0"}
    return {"root": root, "env": env, "cache": root / "cache" / "findings"}


def _check(project: dict, *extra: str, env: dict | None = None, name: str = "f") -> tuple[dict, subprocess.CompletedProcess]:
    out = project["root"] / f"{name}.json"
    out.unlink(missing_ok=True)
    proc = run_cli("check", "--target", TARGET, "--device", "cpu", "--mode", "fullgraph", "--json", str(out),
                   *extra, cwd=project["root"], env={**project["env"], **(env or {})})
    assert proc.returncode == 1, proc.stderr[-3000:]  # the gate fails on the break
    return json.loads(out.read_text()), proc


def _without_cache(findings: dict) -> dict:
    return {k: v for k, v in findings.items() if k != "cache"}


@pytest.fixture(scope="module")
def first(project) -> dict:
    findings, proc = _check(project, name="first")
    return {"findings": findings, "stdout": proc.stdout}


def test_a_rerun_reads_the_same_findings_back_and_says_so(project, first):
    assert first["findings"]["cache"] == {"source": "traced", "stored_at": "", "not_kept": ""}
    assert "findings cache" not in first["stdout"]
    assert len(list(project["cache"].glob("*.json"))) == 1
    junit, sarif = project["root"] / "g.xml", project["root"] / "g.sarif"
    for path in (junit, sarif):
        path.unlink(missing_ok=True)
    start = time.monotonic()
    again, proc = _check(project, "--junit", str(junit), "--sarif", str(sarif), name="again")
    took = time.monotonic() - start
    assert again["cache"]["source"] == "cache" and again["cache"]["stored_at"].endswith("Z")
    # Identical apart from where they came from.
    assert _without_cache(again) == _without_cache(first["findings"])
    assert "verdict from the findings cache (traced " in proc.stdout
    assert 'name="cache" value="cache"' in junit.read_text()
    run = json.loads(sarif.read_text())["runs"][0]
    assert all(r["properties"]["cache"] == "cache" for r in run["results"])
    assert any("from the findings cache" in n["message"]["text"]
               for n in run["invocations"][0]["toolExecutionNotifications"])
    # No worker, no torch: a few seconds at most even on a loaded machine
    # (docs/benchmarks.md has the measured figure).
    assert took < 10, took


def test_a_touched_but_unchanged_file_still_hits(project, first):
    helper = project["root"] / "src" / "fcache_target" / "helper.py"
    later = time.time_ns() + 5_000_000_000
    os.utime(helper, ns=(later, later))
    again, _ = _check(project, name="touched")
    assert again["cache"]["source"] == "cache"


@pytest.mark.parametrize("where", ["src/fcache_target/helper.py", "lib/fcache_lib/__init__.py"])
def test_one_byte_in_a_module_the_target_imports_traces_again(project, first, where):
    path = project["root"] / where
    text = path.read_text()
    path.write_text(text.replace("a helper module", "a helper modulE") if "helper" in where
                    else text.replace("x * 2", "x * 3"))
    try:
        again, _ = _check(project, name="changed")
        assert again["cache"]["source"] == "traced"
        stored = list(project["cache"].glob("*.json"))
        assert len(stored) == 1  # the entry was replaced, not added to
        # ... and the new entry hits in turn.
        assert _check(project, name="changed-again")[0]["cache"]["source"] == "cache"
    finally:
        path.write_text(text)


def test_an_environment_variable_traces_again(project, first):
    before = set(project["cache"].glob("*.json"))
    changed, _ = _check(project, env={"TORCHDYNAMO_VERBOSE": "0"}, name="env")
    assert changed["cache"]["source"] == "traced"
    assert _without_cache(changed) == _without_cache(first["findings"])
    # A variable outside the list does not.
    other, _ = _check(project, env={"TORCHDYNAMO_VERBOSE": "0", "SOME_UNRELATED_VARIABLE": "1"}, name="env2")
    assert other["cache"]["source"] == "cache"
    for added in set(project["cache"].glob("*.json")) - before:  # one entry per environment: the others' tests use one
        added.unlink()


def test_no_cache_traces_and_replaces_the_entry(project, first):
    before = {p.name: p.stat().st_mtime_ns for p in project["cache"].glob("*.json")}
    fresh, _ = _check(project, "--no-cache", name="nocache")
    assert fresh["cache"]["source"] == "traced"
    after = {p.name: p.stat().st_mtime_ns for p in project["cache"].glob("*.json")}
    assert set(after) == set(before) and after != before


def _entry(project) -> Path:
    (entry,) = [p for p in project["cache"].glob("*.json")
                if json.loads(p.read_text())["job"]["selection"]["spec"] == TARGET
                and not json.loads(p.read_text())["job"]["path"]]
    return entry


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "foreign"])
def test_a_bad_entry_is_ignored_with_one_line_and_traced_again(project, first, damage):
    _check(project, name="settle")  # an entry for the environment as the module left it
    entry = _entry(project)
    text = entry.read_text()
    if damage == "corrupt":
        entry.write_bytes(b"\x00\x1b[31m" + text.encode()[:100])
    elif damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    else:
        data = json.loads(text)
        data["version"] = 99
        entry.write_text(json.dumps(data))
    again, proc = _check(project, name=damage)
    assert again["cache"]["source"] == "traced"
    lines = [line for line in proc.stderr.splitlines() if "ignoring the cache entry" in line]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"graphbreak-doctor: ignoring the cache entry {entry}: ")
    assert "\x1b" not in proc.stderr
    assert {"corrupt": "not JSON", "truncated": "not JSON", "foreign": "format version 99"}[damage] in lines[0]
    # Traced again and written whole: the next run hits.
    assert _check(project, name=f"{damage}-2")[0]["cache"]["source"] == "cache"


def test_a_changed_distribution_version_misses(project, first):
    """The recorded version of torch differs from the installed one's METADATA."""
    from graphbreak_doctor.jobs import inputs

    recorded = json.loads(_entry(project).read_text())["inputs"]
    assert recorded["versions"]["torch"] and inputs.changed(recorded) == ""
    recorded["versions"]["torch"] = "1.0.0"
    assert inputs.changed(recorded).startswith("torch is now ")
    # And a METADATA file that changed (a reinstall) is a changed file.
    metadata = [p for p in recorded["files"] if p.endswith("METADATA") and "torch-" in p]
    assert metadata
    recorded["files"][metadata[0]][3] = "0" * 64
    recorded["files"][metadata[0]][0] += 1
    assert inputs.changed(recorded) == f"{metadata[0]} changed"


def test_two_writers_at_once_leave_a_valid_entry(project, first, tmp_path):
    """Two processes storing the same key over and over, at once."""
    entry = _entry(project)
    data = json.loads(entry.read_text())
    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        import json, sys
        from graphbreak_doctor.jobs import findings_cache
        from graphbreak_doctor.jobs.job import Job, Outcome
        from graphbreak_doctor.model import Findings
        data = json.load(open({str(entry)!r}))
        job = Job.from_dict({{**data["job"], "log": "", "debug": False}})
        outcome = Outcome(job, findings=Findings.from_dict(data["outcome"]["findings"]), inputs=data["inputs"],
                          message=sys.argv[1])
        secret = findings_cache.trusted_secret()
        for _ in range(40):
            findings_cache.store(job, "k" * 64, outcome, sys.argv[1] * 100000, secret)
    """)
    env = {**os.environ, "GRAPHBREAK_DOCTOR_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", script, tag], env=env) for tag in ("a", "b")]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    files = os.listdir(cache / "findings")
    assert files == ["k" * 64 + ".json"]  # no temporary file left behind
    stored = json.loads((cache / "findings" / files[0]).read_text())
    assert stored["outcome"]["message"] in ("a", "b") and stored["log"] == stored["outcome"]["message"] * 100000
    assert stored["inputs"] == data["inputs"]


def test_the_key_covers_the_environment_and_leaves_per_run_fields_out():
    from graphbreak_doctor.jobs import findings_cache
    from graphbreak_doctor.jobs.job import TRACE, Job
    from graphbreak_doctor.targets.provider import Selection

    job = Job(TRACE, Selection("factory", "t", {"spec": TARGET}, spec=TARGET), "cpu", "fullgraph")
    base = {"PATH": "/usr/bin", "HOME": "/home/x"}
    key = findings_cache.pre_key(job, 0, base)
    assert findings_cache.pre_key(job.__class__(**{**job.__dict__, "log": "/tmp/l", "debug": True}), 0, base) == key
    for name in ("FLASHINFER_CUBIN_DIR", "TORCHDYNAMO_VERBOSE", "SGL_X", "PYTHONHASHSEED", "GRAPHBREAK_DOCTOR_X"):
        assert findings_cache.pre_key(job, 0, {**base, name: "1"}) != key, name
    for name in ("GRAPHBREAK_DOCTOR_CACHE", "GRAPHBREAK_DOCTOR_NO_CACHE", "TERM"):
        assert findings_cache.pre_key(job, 0, {**base, name: "1"}) == key, name
    assert findings_cache.pre_key(job, 1 << 30, base) != key
    assert findings_cache.pre_key(job.__class__(**{**job.__dict__, "device": "sm120"}), 0, base) != key


def test_a_file_whose_stat_is_unchanged_is_not_hashed_again(project, tmp_path):
    """The file-hash memo (jobs/hash_memo.py): a job takes the hash of a file
    whose size and times are as they were from the memo -- a poisoned hash
    proves the file was not read -- and hashes a file whose change time moved."""
    env = {"GRAPHBREAK_DOCTOR_CACHE": str(tmp_path / "cache")}
    helper = str(project["root"] / "src" / "fcache_target" / "helper.py")
    library = str(project["root"] / "lib" / "fcache_lib" / "__init__.py")
    _check(project, env=env, name="memo")
    memo_path = tmp_path / "cache" / "file-hashes.json"
    memo = json.loads(memo_path.read_text())
    real = {p: memo["files"][p][3] for p in (helper, library)}
    for p in (helper, library):
        memo["files"][p][3] = "0" * 64
    memo_path.write_text(json.dumps(memo))
    os.utime(library)  # same bytes, a new change time
    _, proc = _check(project, "--no-cache", env=env, name="memo-2")
    (entry,) = (tmp_path / "cache" / "findings").glob("*.json")
    files = json.loads(entry.read_text())["inputs"]["files"]
    assert files[helper][3] == "0" * 64  # from the memo: its stat is as it was
    assert files[library][3] == real[library]  # hashed again
    assert "memo" not in proc.stderr


def test_a_bad_file_hash_memo_is_ignored_with_one_line(tmp_path, monkeypatch, capsys):
    from graphbreak_doctor.jobs import hash_memo, inputs

    monkeypatch.setenv("GRAPHBREAK_DOCTOR_CACHE", str(tmp_path))
    hash_memo.path().write_bytes(b"\x1b[31m{not json")
    assert hash_memo.load() == {}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ignoring the file-hash memo" in err and "\x1b" not in err
    source = tmp_path / "a.py"
    source.write_text("x = 1\n")
    identity = inputs.file_identity(str(source))
    hash_memo.save({str(source): identity}, {})
    assert hash_memo.load() == {str(source): identity}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "file-hashes.json"]  # no temporary file left


def test_cache_clear_empties_it(project, first):
    assert list(project["cache"].glob("*.json"))
    assert (project["cache"].parent / "file-hashes.json").exists()
    proc = run_cli("cache", "clear", cwd=project["root"], env=project["env"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("findings cache: removed ") and " entr" in proc.stdout
    assert not list(project["cache"].glob("*.json"))
    assert not (project["cache"].parent / "file-hashes.json").exists()
    again = run_cli("cache", "clear", cwd=project["root"], env=project["env"])
    assert again.returncode == 0 and "removed 0 entries" in again.stdout
    bad = run_cli("cache", "remove", cwd=project["root"], env=project["env"])
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
