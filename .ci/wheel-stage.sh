#!/usr/bin/env bash
# The wheel stage (`make test-wheel`): the doctor as a user installs it.
#
# Builds the wheel from a copy of the package's sources (nothing left over in
# the checkout, a build/ folder or an egg-info, can leak into it), installs it
# without dependencies into VENV (the pins of the package's own
# matrix/requirements/ci.txt, no doctor: the Makefile builds it), and runs
# every command from a temporary folder outside the checkout, which is then
# not importable: trace (the user's module, then GLM-5's dense layer, the
# main job), check --from, report, ingest of a TORCH_TRACE a real
# torch.compile wrote there, and the cheapest real matrix cell (the installed
# FlashInfer, one device, one mode; its environment in a temporary folder,
# built from uv's cache or the index, torch from the local wheel folder).
# Each command must end with the exit code it documents (README.md).
#
# Usage: .ci/wheel-stage.sh VENV
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKOUT=$PWD
VENV=$CHECKOUT/${1:?usage: .ci/wheel-stage.sh VENV}
PY=$VENV/bin/python
DOCTOR=$VENV/bin/graphbreak-doctor
WORK=$(mktemp -d "${TMPDIR:-/tmp}/graphbreak-doctor-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
unset PYTHONPATH
# A cache folder of the stage's own: every command here traces (none reads a
# finding an earlier run kept), and a user's cache is left alone.
export GRAPHBREAK_DOCTOR_CACHE=$WORK/cache
START=$SECONDS

say() { echo "test-wheel [$((SECONDS - START)) s]: $*"; }
fail() { echo "test-wheel: FAILED: $*" >&2; exit 1; }
# expect CODE COMMAND...: run it (its output in the stage's log), fail unless it exits CODE.
expect() {
    local want=$1 code=0
    shift
    say "$* (expects exit $want)"
    "$@" || code=$?
    [ "$code" = "$want" ] || fail "$* exited $code, not $want"
}

say "building the wheel"
mkdir -p "$WORK/source" "$WORK/dist" "$WORK/user"
# Every tracked file (tests and fixtures too), so that the check below sees
# what the build leaves out.
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$WORK/source"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/source"
WHEEL=$(ls "$WORK"/dist/graphbreak_doctor-*.whl)
"$PY" - "$WHEEL" <<'EOF' || fail "the wheel does not hold what the doctor needs, and only that"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
assert tops == {"graphbreak_doctor"}, tops  # no tests, no fixtures
# Package data: the packaged model configs and the JSON Schemas of what the doctor writes.
assert "graphbreak_doctor/targets/models/glm5/configs/config.json" in names
missing = {f"graphbreak_doctor/model/schema/{kind}.schema.json"
           for kind in ("findings", "baseline", "diff", "matrix")} - names
assert not missing, missing
EOF
"$PY" -m pip install -q --no-deps --force-reinstall "$WHEEL"

cd "$WORK/user"
"$PY" - "$CHECKOUT" <<'EOF' || fail "the doctor does not import from the environment's site-packages"
import sys, sysconfig
from pathlib import Path
import graphbreak_doctor
where = Path(graphbreak_doctor.__file__).resolve()
site = Path(sysconfig.get_paths()["purelib"]).resolve()
assert site in where.parents, f"graphbreak_doctor imported from {where}, not {site}"
assert Path(sys.argv[1], "graphbreak_doctor").resolve() not in where.parents, where
print(f"graphbreak_doctor from {where}")
EOF

# The user's own module: a layer that runs a child process on every call
# (category subprocess). A worker that builds it notes which doctor and which
# interpreter it runs in (where.txt).
cat > user_layer.py <<'EOF'
import subprocess
import sys
from pathlib import Path

import torch

import graphbreak_doctor


def probe_version() -> str:
    return subprocess.check_output([sys.executable, "--version"], text=True)


def layer(x):
    y = x * 2
    return y + len(probe_version())


def target():
    with open(Path(__file__).with_name("where.txt"), "a", encoding="utf-8") as f:
        f.write(f"{sys.prefix} {graphbreak_doctor.__file__}\n")
    return layer, (torch.ones(8),)


if __name__ == "__main__":  # the user's own program, under plain torch.compile
    torch.compile(layer, backend="eager")(torch.ones(8))
EOF

expect 0 "$DOCTOR" trace --target user_layer:target --json trace.json --no-html
"$PY" - <<'EOF' || fail "trace.json does not hold the subprocess break"
import json
findings = json.load(open("trace.json"))
assert [b["category"] for b in findings["breaks"]] == ["subprocess"], findings["breaks"]
assert findings["fullgraph"]["ok"] is False, findings["fullgraph"]
EOF
# The gate without a criterion is --max-breaks 0: the break fails it (exit 1);
# one break allowed, it passes.
expect 1 "$DOCTOR" check --from trace.json --junit gate.xml
expect 0 "$DOCTOR" check --from trace.json --max-breaks 1
expect 0 "$DOCTOR" report trace.json --html report.html
grep -q probe_version report.html || fail "report.html does not show the break's function"

# The main job, GLM-5's dense layer, in fullgraph mode (one worker: what a
# fullgraph compile sees): it stops where the checkout's golden of this
# FlashInfer says.
expect 0 "$DOCTOR" trace --layer dense --mode fullgraph --json --no-html
"$PY" - "$CHECKOUT" <<'EOF' || fail "the installed doctor's dense layer does not stop where the golden says"
import importlib.metadata, json, sys
from pathlib import Path
findings = json.load(open("reports/glm5-dense-sm120-fullgraph.json"))
golden = Path(sys.argv[1], "tests", "golden",
              f"glm5-dense-sm120-flashinfer-{importlib.metadata.version('flashinfer-python')}.json")
first = json.loads(golden.read_text())["fullgraph_first"]
stopped = next(b for b in findings["breaks"] if b["id"] == findings["fullgraph"]["break_id"])
assert (stopped["category"], stopped["gb_type"]) == (first["category"], first["gb_type"]), (stopped, first)
print(f"dense layer: fullgraph stops at {stopped['category']} ({stopped['gb_type']}), as the golden says")
EOF

say "a TORCH_TRACE of the user's program under torch.compile"
TORCH_TRACE="$WORK/user/tt" "$PY" user_layer.py
expect 0 "$DOCTOR" ingest tt --json ingest.json --no-html
"$PY" - <<'EOF' || fail "ingest.json does not hold the subprocess break"
import json
findings = json.load(open("ingest.json"))
assert "subprocess" in [b["category"] for b in findings["breaks"]], findings["breaks"]
EOF

rm -f where.txt
expect 0 "$DOCTOR" matrix --target user_layer:target --device sm120 --mode fullgraph --jobs 1 \
    --envs "$WORK/envs" --json matrix.json --no-html
"$PY" - "$WORK/envs" <<'EOF' || fail "the matrix cell did not run the wheel's doctor in its own environment"
import json, sys
from pathlib import Path
envs = Path(sys.argv[1]).resolve()
(cell,) = json.load(open("matrix.json"))["cells"]
assert (cell["status"], cell["category"]) == ("failed", "subprocess"), cell
(env,) = [p for p in envs.iterdir() if not p.name.startswith(".")]
manifest = json.loads((env / "matrix-env.json").read_text())
assert manifest["doctor"]["from"] == "distribution", manifest["doctor"]
# The worker built the target with the environment's own interpreter and doctor.
(line,) = Path("where.txt").read_text().splitlines()
prefix, doctor = line.split(" ", 1)
assert Path(prefix).resolve() == env, line
assert env in Path(doctor).resolve().parents, line
print(f"matrix cell: {cell['status']} ({cell['category']}) in {env.name}, doctor {manifest['doctor']}")
EOF
say "passed"
