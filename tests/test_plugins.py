"""Plugins: a package outside the repository, installed into a virtual
environment of its own, adds a traced-code provider, a break category, a
recipe, a device, an output format and a CUDA-graph hazard detector through
its entry points; the doctor finds them there, traces and checks with them,
and leaves a plugin that fails to load out with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

PLUGIN = '''
"""A plugin of the doctor's: ``--sleepy`` traces a function that sleeps on its
traced path, and the ``sleep`` category (advice: ``drop-sleep``) claims that break.
Its hazard detector finds a cumulative sum inside a captured CUDA-graph
segment (category ``cudagraph-cumsum``); ``--located-csv`` writes the gate's
located problems as CSV."""

import json
import time
from pathlib import Path

import torch

from graphbreak_doctor.analysis.categories.category import Category, Rule
from graphbreak_doctor.cudagraph.detectors.detector import OPERATOR, HazardDetector
from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.model import TargetInfo
from graphbreak_doctor.recipes.recipe import Advice, Recipe
from graphbreak_doctor.render.renderer import GATE, Renderer
from graphbreak_doctor.targets import LaunchRefused, Target
from graphbreak_doctor.targets.frameworks.framework import Framework
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider


def sleepy(x):
    x = x + 1
    time.sleep(0)
    return x * 2


class SleepyProvider(TargetProvider):
    name = "sleepy"
    title = "a function that sleeps"
    options = (Option("--sleepy", "trace the sleeping function", switch=True, selects=True),)

    def select(self, options):
        return [Selection(self.name, "sleepy", {}, spec="sleepy")]

    def build(self, selection, device, log):
        return Target(fn=sleepy, args=(torch.ones(4),), info=TargetInfo(spec="sleepy", provider=self.name,
                                                                       title="a function that sleeps"))


PROVIDER = SleepyProvider()
CATEGORY = Category(name="sleep", why="a sleep on the traced path", evidence="`time.sleep`",
                    rules=(Rule(culprits=("time.sleep",)),), advice="drop-sleep", ladder=(), priority=5)
DEVICE = DevicePreset(name="cpu-too", emulated=False)
RECIPE = Recipe("drop-sleep", Advice("Drop {call} from {function}", "Waiting has no place in a graph.",
                                     "# before: time.sleep(...)\\n# after: (nothing)"))


def running_total(x):
    return x.cumsum(0)


def cumsum_in_capture(size=16):
    return running_total, (torch.randn(size, 8, device="cuda"),)


def _cumsum(op):
    return "a cumulative sum" if op.kind == OPERATOR and op.func is torch.ops.aten.cumsum.default else ""


CUMSUM = Category(name="cudagraph-cumsum", why="a cumulative sum inside a captured segment", evidence="`cumsum`",
                  rules=(), advice="drop-sleep", ladder=(), priority=95)
DETECTOR = HazardDetector("cumsum", "cudagraph-cumsum", _cumsum, help="a cumulative sum in a captured segment")
ORPHAN = HazardDetector("orphan", "no-such-category", _cumsum)


def located_csv(report):
    rows = ["target,kind,category,file,line,level"]
    for t in report.targets:
        for loc in t.located:
            where = [loc.frame.file, str(loc.frame.line)] if loc.frame else ["", ""]
            rows.append(",".join([t.name, loc.kind, loc.category, *where, "error" if loc.failing else "note"]))
    return "\\n".join(rows) + "\\n"


RENDERER = Renderer("located-csv", GATE, located_csv, suffix=".csv", option="--located-csv",
                    help="the located problems as CSV", title="located CSV")
TAKEN = Renderer("sarif-again", GATE, located_csv, suffix=".sarif", option="--sarif")


class TinyServed(torch.nn.Module):
    """What toyserve serves of a model: one projection of its hidden size
    (cut to 64 on this machine), then a sleep on the forward's path."""

    def __init__(self, hidden):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        x = self.proj(x)
        time.sleep(0)
        return x * 2


class Toyserve(Framework):
    """A third serving framework: ``--toyserve-args "MODEL --batches 1,4,16"``
    (its own grammar: the model first, then its batch sizes), one phase
    (``serve``), and a server that compiles the model's forward with
    fullgraph=True and calls it at each batch size."""

    name = "toyserve"
    title = "Toyserve"
    distribution = "gbd-sleepy-plugin"
    module = "gbd_sleepy_plugin"
    phases = ("serve",)
    docs = "gbd_sleepy_plugin's docstring"

    def launch_option(self):
        return Option(self.option, "toyserve's launch arguments: MODEL [--batches N,N,...]", metavar="ARGS",
                      command_line=True, selects=True)

    def split_launch(self, text, config):
        words = text.split()
        model = words.pop(0) if words and not words[0].startswith("-") else None
        if model is not None and config is not None:
            raise ValueError(f"{self.option} names a model and --config another: give one")
        return tuple(words), model if model is not None else config

    def server_sizes(self, launch, phase):
        sizes = [int(n) for n in (launch.get("resolved") or {}).get("batches") or []]
        return sizes, ("toyserve's batch sizes (its resolved launch)" if sizes else "")

    def build(self, served, what, device, log):
        words = list(what.launch)
        batches = [1, 4, 16]
        if "--batches" in words:
            given = words[words.index("--batches") + 1:][:1]
            if not given or not all(n.isdigit() for n in given[0].split(",")):
                said = f"--batches takes sizes such as 1,4,16, not {' '.join(given) or 'nothing'}"
                raise LaunchRefused(f"toyserve {self.release()} refuses the launch: {said}", said=said)
            batches = [int(n) for n in given[0].split(",")]
        config = json.loads((Path(served.config_dir) / "config.json").read_text())
        hidden = min(int(config.get("hidden_size", 64)), 64)
        model = TinyServed(hidden)
        launch = {"framework": self.name, "release": self.release(), "arguments": words,
                  "resolved": {"batches": batches, "hidden_size": config.get("hidden_size")},
                  "said": [f"serving {served.name} at {len(batches)} batch sizes"],
                  "phases": {"serve": f"the forward compiled with torch.compile (fullgraph) at batches {batches}"}}
        info = TargetInfo(spec=f"{served.spec}:model", provider=served.provider,
                          title=f"{served.name} forward, Toyserve {self.release()}",
                          facts={**served.facts, "model": served.name, "scope": "model", "launch": launch})
        target = Target(fn=model, args=(torch.randn(what.tokens or batches[-1], hidden),), info=info,
                        eager_phases=True)

        def discover(log, phase):
            compiled = torch.compile(model.forward, fullgraph=True)
            with phase("serve"):
                for size in batches:
                    compiled(torch.randn(size, hidden))

        target.discover = discover
        return target


FRAMEWORK = Toyserve()


class Unready(Toyserve):
    name = "unready"

    def launch_option(self):
        raise RuntimeError("not ready")


UNREADY = Unready()
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "gbd-sleepy-plugin"
version = "0.1"

[tool.setuptools]
py-modules = ["gbd_sleepy_plugin"]

[project.entry-points."graphbreak_doctor.providers"]
sleepy = "gbd_sleepy_plugin:PROVIDER"

[project.entry-points."graphbreak_doctor.categories"]
sleep = "gbd_sleepy_plugin:CATEGORY"
broken = "gbd_sleepy_plugin:MISSING"
cumsum = "gbd_sleepy_plugin:CUMSUM"

[project.entry-points."graphbreak_doctor.hazard_detectors"]
cumsum = "gbd_sleepy_plugin:DETECTOR"
orphan = "gbd_sleepy_plugin:ORPHAN"

[project.entry-points."graphbreak_doctor.renderers"]
located-csv = "gbd_sleepy_plugin:RENDERER"
taken = "gbd_sleepy_plugin:TAKEN"

[project.entry-points."graphbreak_doctor.recipes"]
drop-sleep = "gbd_sleepy_plugin:RECIPE"

[project.entry-points."graphbreak_doctor.devices"]
cpu-too = "gbd_sleepy_plugin:DEVICE"

[project.entry-points."graphbreak_doctor.frameworks"]
toyserve = "gbd_sleepy_plugin:FRAMEWORK"
unready = "gbd_sleepy_plugin:UNREADY"
'''


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory) -> Path:
    """A virtual environment that sees this one's packages (torch, the doctor)
    and has the plugin installed into it, as a user installs one."""
    work = tmp_path_factory.mktemp("plugin")
    source = work / "src"
    source.mkdir()
    (source / "gbd_sleepy_plugin.py").write_text(textwrap.dedent(PLUGIN))
    (source / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # This environment's packages, after the new one's own.
    (Path(site) / "outer.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    # uv, which the doctor builds its environments with, installs the plugin.
    subprocess.run([sys.executable, "-m", "uv", "pip", "install", "--python", str(python), "--offline", "--no-index",
                    "--no-deps", "--no-build-isolation", str(source)], check=True, capture_output=True, cwd=work)
    return python


def _doctor(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-m", "graphbreak_doctor", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_a_plugin_adds_a_provider_a_category_a_recipe_and_a_device(plugin_venv, tmp_path):
    out = tmp_path / "sleepy.json"
    result = _doctor(plugin_venv, "trace", "--sleepy", "--device", "cpu-too", "--mode", "both", "--json", str(out),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    findings = json.loads(out.read_text())
    assert findings["target"]["provider"] == "sleepy" and findings["device"]["name"] == "cpu-too"
    (brk,) = findings["breaks"]
    assert brk["category"] == "sleep" and brk["culprit"].endswith("sleep")
    assert brk["fix"]["recipe"] == "drop-sleep" and brk["fix"]["summary"].startswith("Drop ")
    # The entry point that names nothing is left out, said in one line (in
    # the doctor and in each of its workers), and the rest still works.
    warnings = [line for line in result.stderr.splitlines() if "plugin broken" in line]
    assert warnings and all(w == warnings[0] for w in warnings), result.stderr
    assert "failed to load: AttributeError" in warnings[0] and warnings[0].endswith("left out")
    assert "sleepy" in _doctor(plugin_venv, "trace", "--help", cwd=tmp_path).stdout


def test_plugins_can_be_turned_off_and_are_not_seen_elsewhere(plugin_venv, tmp_path):
    env = {**os.environ, "GRAPHBREAK_DOCTOR_NO_PLUGINS": "1"}
    env.pop("PYTHONPATH", None)
    off = subprocess.run([str(plugin_venv), "-m", "graphbreak_doctor", "trace", "--sleepy"], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=300)
    assert off.returncode == 2 and "--sleepy" in off.stderr and "plugin" not in off.stderr
    from graphbreak_doctor.analysis import categories

    assert "sleep" not in categories.CATEGORIES  # this environment has no plugin installed


def test_a_plugin_renderer_and_hazard_detector_work_in_check(plugin_venv, tmp_path):
    out = tmp_path / "located.csv"
    result = _doctor(plugin_venv, "check", "--target", "gbd_sleepy_plugin:cumsum_in_capture", "--cudagraph",
                     "--mode", "explain", "--located-csv", str(out), "--sarif", str(tmp_path / "gate.sarif"),
                     cwd=tmp_path)
    # The plugin's hazard fails the gate as a built-in one does.
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    assert "cudagraph-hazard: 1 capture hazard not in the baseline; first: cudagraph-cumsum" in result.stdout
    rows = out.read_text().splitlines()
    assert rows[0] == "target,kind,category,file,line,level"
    (row,) = [r.split(",") for r in rows[1:] if ",cudagraph-hazard,cudagraph-cumsum," in r]
    plugin_file = Path(row[3])
    assert plugin_file.name == "gbd_sleepy_plugin.py" and row[5] == "error", rows
    line = next(i for i, text in enumerate(plugin_file.read_text().splitlines(), 1) if "x.cumsum(0)" in text)
    assert int(row[4]) == line, rows
    # The built-in SARIF reads the same list: the plugin's category is its rule.
    doc = json.loads((tmp_path / "gate.sarif").read_text())
    (hazard,) = [r for r in doc["runs"][0]["results"] if r["ruleId"] == "cudagraph-cumsum"]
    assert hazard["locations"][0]["physicalLocation"]["region"]["startLine"] == line
    # A renderer whose option is taken is left out with one line; so is a
    # detector of a category no one registered (where the detectors load).
    assert "taken = gbd_sleepy_plugin:TAKEN (graphbreak_doctor.renderers): its option '--sarif' is taken" \
           in result.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run([str(plugin_venv), "-c", "from graphbreak_doctor.cudagraph import detectors; "
                             "print(' '.join(d.name for d in detectors.registry()))"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert listed.stdout.split() == ["host-sync", "frozen-host-value", "unregistered-generator", "cumsum"], listed
    assert "orphan = gbd_sleepy_plugin:ORPHAN (graphbreak_doctor.hazard_detectors): its category " \
           "'no-such-category' is not registered; left out" in listed.stderr


def test_a_plugin_adds_a_serving_framework(plugin_venv, tmp_path):
    """A third framework, through its entry point only: its launch option,
    grammar and phase, the model it serves from a packaged model's config
    folder, its compile map (the region its server compiles, entered at its
    batch sizes), its words about the launch, its release in the findings,
    and its refusal of a launch in its own words."""
    out = tmp_path / "toy.json"
    result = _doctor(plugin_venv, "trace", "--toyserve-args", "qwen3-30b-a3b --batches 2,8", "--device", "cpu-too",
                     "--mode", "both", "--json", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["environment"]["toyserve"] == "0.1"
    launch = found["target"]["facts"]["launch"]
    assert launch["framework"] == "toyserve" and launch["resolved"]["batches"] == [2, 8]
    assert found["target"]["facts"]["model"] == "Qwen3MoeForCausalLM"
    (region,) = [r for r in found["regions"] if r["calls"]]
    assert region["function"].endswith("TinyServed.forward") and region["options"]["fullgraph"]
    assert region["calls"] == {"serve": 2} and region["verdict"] != "ok", region
    assert any(b["category"] == "sleep" for b in found["breaks"]), found["breaks"]
    assert "Toyserve said: serving Qwen3MoeForCausalLM at 2 batch sizes" in result.stdout
    helped = _doctor(plugin_venv, "trace", "--help", cwd=tmp_path)
    assert "--toyserve-args" in helped.stdout and "--unready-args" not in helped.stdout
    # A framework whose launch option cannot be made is left out, in one line.
    assert ("plugin unready = gbd_sleepy_plugin:UNREADY (graphbreak_doctor.frameworks): its launch_option() raised "
            "RuntimeError: not ready; left out") in helped.stderr, helped.stderr

    (page,) = [p.read_text() for p in (tmp_path / "reports").glob("*toyserve*.html")]  # the default HTML report
    assert "Toyserve said: serving Qwen3MoeForCausalLM at 2 batch sizes" in page and "TinyServed.forward" in page

    gate = _doctor(plugin_venv, "check", "--toyserve-args", "qwen3-30b-a3b", "--device", "cpu-too",
                   "--mode", "explain", "--sarif", str(tmp_path / "gate.sarif"), "--junit", str(tmp_path / "gate.xml"),
                   cwd=tmp_path)
    assert gate.returncode == 1, gate.stdout + gate.stderr[-3000:]
    sarif = json.loads((tmp_path / "gate.sarif").read_text())
    assert any(r["ruleId"] == "sleep" for r in sarif["runs"][0]["results"]), sarif["runs"][0]["results"]
    assert "qwen3moe-toyserve:model" in (tmp_path / "gate.xml").read_text()

    refused = _doctor(plugin_venv, "trace", "--toyserve-args", "qwen3-30b-a3b --batches many", "--device",
                      "cpu-too", "--mode", "explain", "--json", str(tmp_path / "no.json"), cwd=tmp_path)
    assert refused.returncode == 2 and not (tmp_path / "no.json").exists(), refused.stderr[-3000:]
    (line,) = [ln for ln in refused.stderr.splitlines() if ln.startswith("graphbreak-doctor: error:")]
    assert "toyserve 0.1 refuses the launch: --batches takes sizes such as 1,4,16, not many" in line, line


def _plugin_wheel(folder: Path, version: str, source: str) -> Path:
    """The plugin as a wheel of ``version`` (a zip written here: no build
    backend, no index), its entry points those of PYPROJECT."""
    import base64
    import hashlib
    import tomllib
    import zipfile

    groups = tomllib.loads(PYPROJECT)["project"]["entry-points"]
    info = f"gbd_sleepy_plugin-{version}.dist-info"
    files = {
        "gbd_sleepy_plugin.py": source,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: gbd-sleepy-plugin\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in names.items()) + "\n"
                                            for group, names in groups.items()),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"gbd_sleepy_plugin-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


# Release 0.2 of the plugin's framework: its server's forward no longer sleeps.
SLEEPING_FORWARD = "        x = self.proj(x)\n        time.sleep(0)\n        return x * 2\n"


@pytest.mark.plugin_matrix
def test_a_plugin_framework_is_a_matrix_axis_over_its_releases(plugin_venv, tmp_path):
    """`matrix --model --toyserve 0.1,0.2`: the plugin's framework contributes
    its axis and launch arguments; each release is built from a local wheel
    into an environment of its own by its framework's recipe (the default:
    the doctor's pinned base file and the release's distribution), and each
    cell maps the model as that release serves it. 0.1's server breaks at
    its sleep, 0.2's does not; the neighbour diff says what changed."""
    source = textwrap.dedent(PLUGIN)
    assert SLEEPING_FORWARD in source
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _plugin_wheel(wheels, "0.1", source)
    _plugin_wheel(wheels, "0.2", source.replace(SLEEPING_FORWARD, "        x = self.proj(x)\n        return x * 2\n"))
    out = tmp_path / "m.json"
    result = _doctor(plugin_venv, "matrix", "--model", "--toyserve", "0.1,0.2", "--toyserve-args",
                     "qwen3-30b-a3b --batches 2,8", "--device", "sm120", "--find-links", str(wheels),
                     "--envs", str(tmp_path / "envs"), "--json", str(out), "--html", str(tmp_path / "m.html"),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert (data["framework"], data["releases"], data["impl"]) == ("toyserve", ["0.1", "0.2"], "toyserve")
    assert data["launch"] == ["--batches", "2,8"] and data["model"] == "Qwen3MoeForCausalLM"
    cells = {c["release"]: c for c in data["cells"]}
    assert set(cells) == {"0.1", "0.2"} and all(c["framework"] == "toyserve" for c in cells.values())
    for release, cell in cells.items():
        # Each cell ran its own release, installed from its wheel.
        assert cell["findings"]["environment"]["toyserve"] == release, cell["reason"]
        assert cell["said"] == ["Toyserve said: serving Qwen3MoeForCausalLM at 2 batch sizes"]
        assert cell["prefill"].startswith("the forward compiled with torch.compile (fullgraph) at batches [2, 8]")
        (region,) = cell["regions"]
        assert region["function"].endswith("TinyServed.forward") and region["phases"] == {"serve": 2}
    assert cells["0.1"]["status"] == "failed" and cells["0.1"]["regions"][0]["verdict"] != "ok"
    assert cells["0.2"]["status"] == "ok" and cells["0.2"]["regions"][0]["verdict"] == "ok", cells["0.2"]
    (diff,) = data["diffs"]
    assert (diff["axis"], diff["a"], diff["b"]) == ("toyserve", "0.1", "0.2")
    assert diff["summary"] == "0.1 -> 0.2: region forward: fails -> ok", diff
    assert "matrix: Qwen3MoeForCausalLM model forward, Toyserve's compile map" in result.stdout
    assert "toyserve 0.2 + flashinfer" in (tmp_path / "m.html").read_text()
    # A launch no release takes is bad input, in the framework's own words.
    refused = _doctor(plugin_venv, "matrix", "--model", "--toyserve", "0.1", "--toyserve-args",
                      "qwen3-30b-a3b --batches many", "--device", "sm120", "--find-links", str(wheels),
                      "--envs", str(tmp_path / "envs"), "--json", str(tmp_path / "no.json"), cwd=tmp_path)
    assert refused.returncode == 2 and not (tmp_path / "no.json").exists(), refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "no release in the matrix takes the launch arguments: Toyserve 0.1: "
        "--batches takes sizes such as 1,4,16, not many"), refused.stderr[-2000:]
