"""`fix --write-patch DIR` on hostile ground: a DIR that holds the user's
files, a manifest or blocks that were tampered with, two patch folders at
once, another user's server, a signal during the check, a DIR that cannot be
written. Each test drives the real CLI (or a fresh interpreter loading the
written patch) on a small CPU target."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from test_write_patch import TILELIB, _fix_here, _python

PACKAGE = "graphbreak_doctor_patch"
UNPATCHED = "nothing is patched, the process goes on unpatched"

# The target: tilelib's filesystem probe (one hoist, written as a block for
# tilelib). Its factory leaves a mark, so a test can tell the ladder never
# ran; in a process that loaded a patch (the fresh-process check) it can be
# made to wait, so a test can signal the doctor during the check.
SAFETY_TARGET = '''import sys
import time
from pathlib import Path

import torch

import tilelib

HERE = Path(__file__).resolve().parent


def target(size: int = 48):
    (HERE / "factory-called").touch()
    if "graphbreak_doctor_patch" in sys.modules and (HERE / "hang-in-check").exists():
        (HERE / "checking").touch()
        time.sleep(600)

    def fn(x):
        return tilelib.scale(x) + 1
    return fn, (torch.randn(size, 64),)
'''
FILES = {"tilelib.py": TILELIB, "safety_target.py": SAFETY_TARGET}


def _project(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (where / name).write_text(text, encoding="utf-8")
    return where


def _doctor(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("fix", "--target", "safety_target:target", "--device", "cpu", "--no-html", *args, cwd=cwd, env=env)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused_before_the_ladder(proc: subprocess.CompletedProcess, project: Path, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphbreak-doctor: error: ") and "--write-patch" in lines[0], \
        proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not (project / "factory-called").exists(), "the ladder ran before DIR was refused"


@pytest.fixture(scope="module")
def patch(tmp_path_factory) -> Path:
    """One `fix --write-patch` of the target, under umask 022 (as most
    servers' users have it); the folder it wrote."""
    project = _project(tmp_path_factory.mktemp("safety"))
    umask = os.umask(0o022)
    try:
        proc, findings, folder = _fix_here(project, FILES, "--target", "safety_target:target", "--device", "cpu")
    finally:
        os.umask(umask)
    assert findings.fix.patch is not None and folder.is_dir(), proc.stderr[-3000:]
    loaded = _python("import tilelib, graphbreak_doctor_patch as p; print(p.STATE['applied'])", folder, cwd=project)
    assert (loaded.stdout.strip(), loaded.stderr) == ("['tilelib']", ""), loaded.stderr
    return folder


# --------------------------------------------- item 1: nothing else deleted

def test_a_patch_folder_never_deletes_files_the_doctor_did_not_write(patch, tmp_path):
    project = _project(tmp_path)
    # The folder: a manifest.json of no patch's shape, beside the user's file.
    proj = project / "proj"
    (proj / PACKAGE).mkdir(parents=True)
    (proj / PACKAGE / "manifest.json").write_text("{}\n", encoding="utf-8")
    (proj / "precious.txt").write_text("x\n", encoding="utf-8")
    before = _tree(proj)
    _refused_before_the_ladder(_doctor(project, "--write-patch", "proj"), project, "did not write")
    assert _tree(proj) == before
    # The doctor's own earlier patch, with a file of the user's put in it.
    earlier = project / "earlier"
    shutil.copytree(patch, earlier)
    (earlier / "notes.txt").write_text("mine\n", encoding="utf-8")
    before = _tree(earlier)
    _refused_before_the_ladder(_doctor(project, "--write-patch", "earlier"), project, "notes.txt", "did not write")
    assert _tree(earlier) == before
    (earlier / "notes.txt").unlink()
    # A .py file of the user's among the blocks is no block the manifest names.
    (earlier / PACKAGE / "blocks" / "notes.py").write_text("# mine\n", encoding="utf-8")
    before = _tree(earlier)
    _refused_before_the_ladder(_doctor(project, "--write-patch", "earlier"), project, "blocks/notes.py")
    assert _tree(earlier) == before
    (earlier / PACKAGE / "blocks" / "notes.py").unlink()
    # The earlier patch alone (with bytecode compiled in it) is replaced, whole.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(earlier)], check=True)
    assert (earlier / "__pycache__").is_dir() and (earlier / PACKAGE / "blocks" / "__pycache__").is_dir()
    (earlier / "README.txt").write_text("the earlier README\n", encoding="utf-8")
    proc = _doctor(project, "--write-patch", "earlier")
    assert proc.returncode in (0, 1) and "patch written to earlier" in proc.stdout, proc.stderr[-3000:]
    assert (earlier / "README.txt").read_text(encoding="utf-8").startswith("graphbreak-doctor patch for ")
    assert not (earlier / "__pycache__").exists()
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".")) == []


# ------------------------------ item 8: the manifest and blocks are checked

EVIL = "open({marker!r}, 'w').write('ran')\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _absolute_block(copy: Path, manifest: dict, evil: bytes) -> str:
    outside = copy.parent / "outside.py"
    outside.write_bytes(evil)
    manifest["modules"]["tilelib"].update(block=str(outside), block_sha256=_sha(evil))
    return "tilelib"


def _dotdot_block(copy: Path, manifest: dict, evil: bytes) -> str:
    (copy.parent / "up.py").write_bytes(evil)
    manifest["modules"]["tilelib"].update(block="../../up.py", block_sha256=_sha(evil))
    return "tilelib"


def _changed_block(copy: Path, manifest: dict, evil: bytes) -> str:
    (copy / PACKAGE / manifest["modules"]["tilelib"]["block"]).write_bytes(evil)
    return "tilelib"


def _standard_library_module(copy: Path, manifest: dict, evil: bytes) -> str:
    (copy / PACKAGE / "blocks" / "json.py").write_bytes(evil)
    manifest["modules"]["json"] = {
        "file": "json/__init__.py", "sha256": _sha(Path(json.__file__).read_bytes()), "distribution": None,
        "functions": ["dumps"], "block": "blocks/json.py", "block_sha256": _sha(evil)}
    return "json"


def _module_outside_the_library(copy: Path, manifest: dict, evil: bytes) -> str:
    """A module of another distribution, claimed for the one the patch names."""
    import packaging.version

    (copy / PACKAGE / "blocks" / "packaging_version.py").write_bytes(evil)
    manifest["versions"] = {"flashinfer-python": importlib.metadata.version("flashinfer-python")}
    manifest["modules"]["packaging.version"] = {
        "file": "packaging/version.py", "sha256": _sha(Path(packaging.version.__file__).read_bytes()),
        "distribution": "flashinfer-python", "functions": ["parse"], "block": "blocks/packaging_version.py",
        "block_sha256": _sha(evil)}
    return "packaging.version"


def _module_of_no_distribution_claimed(copy: Path, manifest: dict, evil: bytes) -> str:
    """An installed library's module, said to be code of no distribution."""
    _module_outside_the_library(copy, manifest, evil)
    manifest["versions"] = {}
    manifest["modules"]["packaging.version"]["distribution"] = None
    return "packaging.version"


def _blocks_linked_outside(copy: Path, manifest: dict, evil: bytes) -> str:
    """The blocks/ folder swapped for a link to a copy elsewhere, its hashes matching."""
    outside = copy.parent / "outside_blocks"
    shutil.move(copy / PACKAGE / "blocks", outside)
    (copy / PACKAGE / "blocks").symlink_to(outside)
    (outside / Path(manifest["modules"]["tilelib"]["block"]).name).write_bytes(evil)
    manifest["modules"]["tilelib"]["block_sha256"] = _sha(evil)
    return "tilelib"


def _block_a_fifo(copy: Path, manifest: dict, evil: bytes) -> str:
    block = copy / PACKAGE / manifest["modules"]["tilelib"]["block"]
    block.unlink()
    os.mkfifo(block)  # opening it would block every process that loads the patch
    return "tilelib"


def _control_characters_in_versions(copy: Path, manifest: dict, evil: bytes) -> str:
    manifest["versions"] = {"flashinfer-python": "0.0\x1b[2J\r\u2028::error::FORGED"}
    return "tilelib"


def _tampered(patch: Path, where: Path, tamper) -> tuple[Path, str, Path]:
    copy = where / "patch"
    shutil.copytree(patch, copy)
    marker = where / "block-ran"
    path = copy / PACKAGE / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    module = tamper(copy, manifest, EVIL.format(marker=str(marker)).encode())
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return copy, module, marker


def _goes_on_unpatched(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphbreak_doctor_patch: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("tamper, says", [
    (_absolute_block, "is not a file of the patch's blocks/ folder"),
    (_dotdot_block, "is not a file of the patch's blocks/ folder"),
    (_changed_block, "is not the one written (its SHA-256 differs)"),
    (_standard_library_module, "is the standard library's"),
    (_module_outside_the_library, "is not a file of flashinfer-python"),
    (_module_of_no_distribution_claimed, "belongs to packaging"),
    (_blocks_linked_outside, "is not a file of the patch's blocks/ folder"),
    (_block_a_fifo, "is not a file of the patch's blocks/ folder"),
    (_control_characters_in_versions, "0.0\\x1b[2J\\r\\u2028::error::FORGED"),
], ids=["absolute-block", "dotdot-block", "changed-block", "stdlib-module", "module-outside-the-library",
        "blocks-linked-outside", "block-a-fifo", "control-characters",
        "library-module-as-own-code"])
def test_a_tampered_manifest_or_block_runs_nothing(patch, tmp_path, tamper, says):
    project = _project(tmp_path / "project")
    copy, module, marker = _tampered(patch, tmp_path, tamper)
    code = (f"import importlib, tilelib, graphbreak_doctor_patch as p; importlib.import_module({module!r}); "
            "print(p.STATE['applied'], hasattr(tilelib, '__graphbreak_doctor_patch__'))")
    proc = _python(code, copy, cwd=project)
    _goes_on_unpatched(proc, says, UNPATCHED)
    assert proc.stdout.strip() == "[] False"
    assert not marker.exists(), "a block ran"


# ------------------------------------------- item 9: inert on any bad input

def _entry(copy: Path, change) -> None:
    path = copy / PACKAGE / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest["modules"]["tilelib"])
    path.write_text(json.dumps(manifest), encoding="utf-8")


@pytest.mark.parametrize("spoil", [
    lambda copy: _entry(copy, lambda e: e.pop("sha256")),
    lambda copy: _entry(copy, lambda e: e.update(functions=5)),
    lambda copy: (copy / PACKAGE / "manifest.json").write_text("{not json", encoding="utf-8"),
    lambda copy: ((copy / PACKAGE / "manifest.json").unlink(), os.mkfifo(copy / PACKAGE / "manifest.json")),
], ids=["entry-without-sha256", "functions-not-a-list", "manifest-not-json", "manifest-a-fifo"])
def test_a_malformed_manifest_leaves_the_library_importable(patch, tmp_path, spoil):
    project = _project(tmp_path / "project")
    copy = tmp_path / "patch"
    shutil.copytree(patch, copy)
    spoil(copy)
    proc = _python("import tilelib, graphbreak_doctor_patch as p; print(p.STATE['applied'], tilelib.scale.__name__)",
                   copy, cwd=project)
    _goes_on_unpatched(proc, UNPATCHED)
    assert proc.stdout.strip() == "[] scale"


def test_a_package_without_its_init_is_one_line_not_silence(patch, tmp_path):
    project = _project(tmp_path / "project")
    copy = tmp_path / "patch"
    shutil.copytree(patch, copy)
    (copy / PACKAGE / "__init__.py").unlink()
    proc = _python("import tilelib; print(tilelib.scale.__name__)", copy, cwd=project)
    _goes_on_unpatched(proc, "__init__.py is missing", UNPATCHED)
    assert proc.stdout.strip() == "scale"


def test_a_block_raising_systemexit_does_not_end_the_process(patch, tmp_path):
    project = _project(tmp_path / "project")
    copy = tmp_path / "patch"
    shutil.copytree(patch, copy)
    block = b"_pick_tile = None\nraise SystemExit(3)\n"
    (copy / PACKAGE / "blocks" / "tilelib.py").write_bytes(block)
    _entry(copy, lambda e: e.update(block_sha256=_sha(block)))
    proc = _python("import tilelib, graphbreak_doctor_patch as p; "
                   "print(p.STATE['applied'], tilelib._pick_tile(4), 'went on')", copy, cwd=project)
    _goes_on_unpatched(proc, "tilelib not patched: SystemExit: 3")
    assert proc.stdout.strip() == "[] 32 went on"  # the module's namespace is as it was


def test_two_patch_folders_neither_recurse_nor_hide_the_environments_sitecustomize(patch, tmp_path):
    project = _project(tmp_path / "project")
    first, second, own = tmp_path / "first", tmp_path / "second", tmp_path / "own"
    shutil.copytree(patch, first)
    shutil.copytree(patch, second)
    own.mkdir()
    (own / "sitecustomize.py").write_text(f"open({str(tmp_path / 'own-ran')!r}, 'w').write('ran')\n",
                                          encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (first, second, own)))
    proc = subprocess.run([sys.executable, "-c", "import tilelib, graphbreak_doctor_patch as p; "
                           "print(p.STATE['applied'], p.__file__.startswith(%r))" % str(first)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    _goes_on_unpatched(proc, "another patch folder is on sys.path", str(second), UNPATCHED)
    assert proc.stdout.strip() == "[] True"
    assert (tmp_path / "own-ran").read_text() == "ran", "the environment's own sitecustomize did not run"


# ------------------------------------- item 10: ordinary permissions, said

def test_the_patch_folder_has_the_permissions_mkdir_gives_and_says_who_can_read_it(patch):
    for path in [patch, *sorted(patch.rglob("*"))]:
        if "__pycache__" in path.parts:
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), f"{path}: {mode:04o}"
    owner = pwd.getpwuid(os.getuid()).pw_name
    readme = (patch / "README.txt").read_text(encoding="utf-8")
    assert f"Who can load it: this folder is drwxr-xr-x (0755), owned by {owner}" in readme
    assert "A process running as another user loads the patch only if it can read the folder" in readme


# ---------------------------- item 11: checked first; whole or as it was

def test_a_dir_that_cannot_be_written_is_refused_before_the_ladder(tmp_path):
    project = _project(tmp_path / "project")
    empty = tmp_path / "empty"  # `.` and '' name it: an empty folder would pass as a new one
    empty.mkdir()
    # As the console script runs: the current folder is not on sys.path (it would be an import root).
    env = {"PYTHONSAFEPATH": "1",
           "PYTHONPATH": os.pathsep.join([str(project), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    for given, says in (("", "expected a folder"), (".", "not the current folder")):
        _refused_before_the_ladder(_doctor(empty, "--write-patch", given, env=env), project, says)
        assert list(empty.iterdir()) == []
    _refused_before_the_ladder(_doctor(project, "--write-patch", "/proc/graphbreak-doctor-patch"), project,
                               "not writable")
    real = project / "real"
    real.mkdir()
    (project / "link").symlink_to(real)
    _refused_before_the_ladder(_doctor(project, "--write-patch", "link"), project, "symbolic link")
    assert os.readlink(project / "link") == str(real) and list(real.iterdir()) == []
    _refused_before_the_ladder(_doctor(project, "--json", "p", "--write-patch", "p"), project, "the patch folder")
    assert not (project / "p").exists()
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".")) == []


def test_a_signal_during_the_check_leaves_the_earlier_patch_as_it_was(patch, tmp_path):
    project = _project(tmp_path / "project")
    earlier = project / "p"
    shutil.copytree(patch, earlier)
    before = _tree(earlier)
    (project / "hang-in-check").touch()
    proc = subprocess.Popen([sys.executable, "-m", "graphbreak_doctor", "fix", "--target", "safety_target:target",
                             "--device", "cpu", "--no-html", "--write-patch", "p"],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (project / "checking").exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the fresh-process check never started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1].endswith("stopped, nothing written"), err
    assert _tree(earlier) == before, "the folder changed, yet 'nothing written' was said"
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".")) == []


# ------------- hostile round five, item 10: only the owner can write a patch

@pytest.mark.parametrize("where", ["blocks-file", "package", "folder", "parent"])
def test_a_patch_others_can_write_is_not_loaded(patch, tmp_path, where):
    """The manifest is not signed: a patch whose folder, package, blocks or
    the folder it lies in its group can write is refused at load, nothing
    runs (a block changed together with its recorded hash would run)."""
    project = _project(tmp_path / "project")
    holder = tmp_path / "holder"
    holder.mkdir(mode=0o755)
    copy = holder / "patch"
    shutil.copytree(patch, copy)
    target = {"blocks-file": next((copy / PACKAGE / "blocks").glob("*.py")), "package": copy / PACKAGE,
              "folder": copy, "parent": holder}[where]
    os.chmod(target, stat.S_IMODE(target.stat().st_mode) | stat.S_IWGRP)
    code = "import tilelib, graphbreak_doctor_patch as p; print(p.STATE['applied'])"
    proc = _python(code, copy, cwd=project)
    _goes_on_unpatched(proc, f"{target} can be written by its group", UNPATCHED)
    assert proc.stdout.strip() == "[]"
    # As the doctor wrote it, the same copy loads.
    os.chmod(target, stat.S_IMODE(target.stat().st_mode) & ~stat.S_IWGRP)
    assert _python(code, copy, cwd=project).stdout.strip() != "[]"


def test_write_patch_refuses_a_folder_others_can_write_before_the_ladder(tmp_path):
    project = _project(tmp_path / "project")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # no sticky bit: anyone could put another folder in DIR's place
    proc = _doctor(project, "--write-patch", str(shared / "patch"))
    _refused_before_the_ladder(proc, project, "can be written by every user")
    os.chmod(shared, 0o1777)  # shared with the sticky bit, as /tmp: no one replaces another's folder
    group = shared / "g"
    group.mkdir()
    os.chmod(group, 0o775)
    proc = _doctor(project, "--write-patch", str(group))
    _refused_before_the_ladder(proc, project, "can be written by its group")
