"""The package's shape: no import cycles and registries that agree. (The
wheel, installed outside the checkout, is CI's wheel stage:
.ci/wheel-stage.sh, and tests/test_wheel.py.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

from conftest import ROOT

PACKAGE = ROOT / "graphbreak_doctor"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports, anywhere in its source
    (function-level imports included): ``from pkg import mod`` counts as mod."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                out.add(full if full in known else module)
    return {m for m in out if m in known and m != name}


def import_graph() -> nx.DiGraph:
    modules = _modules()
    known = set(modules)
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for dep in _imports(name, path, known):
            graph.add_edge(name, dep)
    return graph


def test_no_import_cycles_between_modules():
    graph = import_graph()
    assert graph.number_of_edges() > 100  # the scan sees the imports
    assert graph.has_edge("graphbreak_doctor.cli.trace", "graphbreak_doctor.render")
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:5])


def _part(module: str) -> str:
    """The pipeline part a module belongs to: graphbreak_doctor.<part>."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_import_cycles_between_parts():
    """targets, emulation, capture, analysis, recipes, fix, gate, render, cli and
    the top-level modules never import each other both ways."""
    graph = nx.DiGraph()
    for a, b in import_graph().edges:
        if _part(a) != _part(b) and a != "graphbreak_doctor" and b != "graphbreak_doctor":
            graph.add_edge(_part(a), _part(b))
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "cycles between parts: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:5])


# The pipeline, first to last (docs/architecture.md): a part imports only
# parts before it. A new part gets its place here.
PIPELINE = ("text", "cache", "progress", "patching", "model", "plugins", "frames", "emulation", "targets", "recipes",
            "capture", "analysis", "cudagraph", "diagnose", "compile_map", "fix", "gate", "jobs", "matrix", "ingest", "render",
            "cli", "testing", "__main__")


def test_parts_import_only_parts_before_them():
    place = {part: i for i, part in enumerate(PIPELINE)}
    parts = {_part(m).split(".")[-1] for m in _modules() if m != "graphbreak_doctor"}
    assert parts <= set(PIPELINE), f"parts with no place in PIPELINE: {sorted(parts - set(PIPELINE))}"
    upward = sorted({(a, b) for a, b in import_graph().edges if "graphbreak_doctor" not in (a, b)
                     and place[_part(a).split(".")[-1]] < place[_part(b).split(".")[-1]]})
    assert not upward, "imports of a later part: " + "; ".join(f"{a} -> {b}" for a, b in upward[:10])


FRAMEWORKS = "graphbreak_doctor.targets.frameworks"
MODELS = "graphbreak_doctor.targets.models"


def test_framework_packages_import_no_model_package():
    """A serving framework drives any model from its config folder: no module
    under targets/frameworks/ imports one under targets/models/."""
    graph = import_graph()
    assert any(a.startswith(FRAMEWORKS) for a in graph.nodes) and any(b.startswith(MODELS) for b in graph.nodes)
    assert graph.has_edge("graphbreak_doctor.targets.serving", "graphbreak_doctor.targets.frameworks.registry")
    bad = sorted((a, b) for a, b in graph.edges if a.startswith(FRAMEWORKS) and b.startswith(MODELS))
    assert not bad, bad


_IMPORTERS = {"import_module", "find_spec", "require", "optional", "_lookup", "__import__"}


def _imports_of(tree: ast.AST, package: str) -> list[int]:
    """Lines of ``tree`` that import ``package`` (or a module of it): import
    statements, and calls of an importer (importlib's, the framework
    runtime's require/optional) whose first argument names it."""
    lines = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in _IMPORTERS and isinstance(node.args[0].value, str):
                names = [node.args[0].value.split(":")[0]]
        if any(n == package or n.startswith(package + ".") for n in names):
            lines.append(node.lineno)
    return lines


def test_only_the_sglang_framework_package_imports_sglang():
    inside = PACKAGE / "targets" / "frameworks" / "sglang"
    assert _imports_of(ast.parse((inside / "runtime.py").read_text(encoding="utf-8")), "sglang")  # the scan sees them
    outside = {str(p.relative_to(ROOT)): lines for p in PACKAGE.rglob("*.py") if inside not in p.parents
               and (lines := _imports_of(ast.parse(p.read_text(encoding="utf-8")), "sglang"))}
    assert not outside, outside


def test_no_model_package_holds_framework_driving_code():
    """targets/models/<model>/ is data plus model-specific code: no
    framework package inside it."""
    models = PACKAGE / "targets" / "models"
    frameworks = {p.name for p in (PACKAGE / "targets" / "frameworks").iterdir() if (p / "__init__.py").exists()}
    assert "sglang" in frameworks
    nested = [str(p.relative_to(ROOT)) for p in models.rglob("*") if p.name in frameworks or p.stem in frameworks]
    assert not nested, nested


def _framework_names() -> set[str]:
    from graphbreak_doctor.targets.frameworks import registry

    return {f.name for f in registry.BUILTIN}


def _names_a_framework(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in names
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_a_framework(e, names) for e in node.elts)


def _framework_tests_at(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of ``tree`` that ask which framework something is: a comparison
    or membership test against a framework's name, or its name as a dict key
    (a literal's key, a subscript, ``.get``/``.pop``/``.setdefault``, ``dict(name=...)``)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hit = any(_names_a_framework(n, names) for n in (node.left, *node.comparators))
        elif isinstance(node, ast.Dict):
            hit = any(k is not None and _names_a_framework(k, names) for k in node.keys)
        elif isinstance(node, ast.Subscript):
            hit = _names_a_framework(node.slice, names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            hit = node.func.attr in ("get", "pop", "setdefault") and _names_a_framework(node.args[0], names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            hit = any(k.arg in names for k in node.keywords)
        else:
            hit = False
        if hit:
            lines.append(node.lineno)
    return lines


def test_nothing_outside_a_framework_asks_which_framework_it_is():
    """Outside targets/frameworks/, code asks the framework registry
    (registry.of, of_launch, given, releases) instead of comparing a
    framework's name."""
    names = _framework_names()
    assert names >= {"sglang", "vllm"}
    home = PACKAGE / "targets" / "frameworks"
    assert _framework_tests_at(ast.parse('if a == "vllm" or b in ("x", "sglang"): d = {"vllm": 1}'), names) == [1, 1, 1]
    found = {str(p.relative_to(ROOT)): len(lines) for p in PACKAGE.rglob("*.py") if home not in p.parents
             and (lines := _framework_tests_at(ast.parse(p.read_text(encoding="utf-8")), names))}
    assert found == {}, found


def _findings_built_at(tree: ast.AST) -> list[int]:
    """Lines that call ``Findings(...)`` (or ``model.Findings(...)``)."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == "Findings" or getattr(node.func, "attr", None) == "Findings")]


def test_findings_are_built_in_one_module():
    """Findings are put together in analysis/assemble.py alone (read back
    from JSON with Findings.from_dict)."""
    home = PACKAGE / "analysis" / "assemble.py"
    assert _findings_built_at(ast.parse(home.read_text(encoding="utf-8")))  # the scan sees them
    outside = {str(p.relative_to(ROOT)): lines for p in PACKAGE.rglob("*.py") if p != home
               and (lines := _findings_built_at(ast.parse(p.read_text(encoding="utf-8"))))}
    assert not outside, outside


def test_modules_stay_under_500_lines():
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, long


def test_the_html_report_reads_only_the_model():
    """Renderers show what the findings say; the HTML report imports nothing
    of the pipeline but the model (and the shared helpers)."""
    allowed = ("model", "render", "frames", "text")
    graph = import_graph()
    outside = [d for d in graph.successors("graphbreak_doctor.render.html")
               if d != "graphbreak_doctor" and _part(d).split(".")[-1] not in allowed]
    assert not outside, outside


def test_every_module_imports_on_its_own():
    """Each module imports in a fresh interpreter by itself, in dependency order
    (what an import cycle or a missing import would break)."""
    order = [m for m in reversed(list(nx.topological_sort(import_graph()))) if not m.endswith("__main__")]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    result = subprocess.run([sys.executable, "-c", code, *order], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


# --- registries: each concept is one module plus one registration line ------------


def test_categories_name_recipes_that_exist():
    from graphbreak_doctor import recipes
    from graphbreak_doctor.analysis import categories

    assert [c.name for c in categories.REGISTRY] == list(categories.CATEGORIES)
    assert len({c.priority for c in categories.REGISTRY}) == len(categories.REGISTRY)
    for c in categories.REGISTRY:
        assert recipes.get(c.advice).advice.summary
        for name in c.ladder:
            assert recipes.get(name).plan is not None, f"{c.name}: ladder recipe {name} cannot be applied"
    assert categories.get(categories.FALLBACK).rules == ()


def test_every_recipe_is_reachable_and_advises():
    from graphbreak_doctor import recipes
    from graphbreak_doctor.analysis import categories

    used = {c.advice for c in categories.REGISTRY} | {n for c in categories.REGISTRY for n in c.ladder}
    used |= {r.advice for c in categories.REGISTRY for r in c.rules if r.advice}
    used.add("use-registered-op")  # the refinement every category gets (analysis/fixes.py)
    assert set(recipes.REGISTRY) == used
    for r in recipes.REGISTRY.values():
        text = r.advice.summary.format(call="`x`", function="f", package="lib", op="op")
        assert "{" not in text


def test_a_new_category_is_one_record_and_one_line(monkeypatch):
    """What CONTRIBUTING shows: a Category record, registered, classifies and advises."""
    from graphbreak_doctor.analysis import categories, classify
    from graphbreak_doctor.analysis.categories import Category, Rule
    from graphbreak_doctor.analysis.fixes import suggest
    from graphbreak_doctor.model import Break, Fix, Frame

    random = Category(name="randomness", why="the traced code draws random numbers outside torch",
                      evidence="`random.random`", rules=(Rule(culprits=("random.",)),),
                      advice="precompute-builtin", ladder=("wrap-custom-op",), priority=15)
    registered = categories.registry() + (random,)
    monkeypatch.setattr(categories, "registry", lambda: registered)
    stack = [Frame("/home/u/model.py", 3, "forward", "forward")]
    assert classify.classify("GB0007", "random.random", stack) == "randomness"
    brk = Break(id="x", category="randomness", gb_id="GB0007", gb_type="", explanation="", hints=[],
                culprit="random.random", via="", site=stack[0], actionable_frame=stack[0], package="model",
                stack=stack, count=1, modes=["explain"], fix=Fix("", "", "", ""))
    fix = suggest(brk, "precompute-builtin")
    assert fix.recipe == "precompute-builtin" and "`random.random`" in fix.summary


def test_renderers_are_registered_once_and_offered_as_options(cli):
    from graphbreak_doctor.render import REGISTRY, file_renderers

    names = [r.name for r in REGISTRY]
    assert len(names) == len(set(names))
    options = [r.option for r in file_renderers("findings", "gate")]
    assert len(options) == len(set(options)) and all(r.suffix.startswith(".") for r in file_renderers("findings", "gate"))
    trace_help = cli("trace", "--help").stdout
    check_help = cli("check", "--help").stdout
    for r in file_renderers("findings"):
        assert r.option in trace_help and r.option in check_help
    for r in file_renderers("gate"):
        assert r.option in check_help and r.option not in trace_help


def test_device_presets_are_offered_and_listed_by_the_emulated_nvcc(cli, tmp_path):
    from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation
    from graphbreak_doctor.emulation.presets import PRESETS, emulated_presets

    help_text = cli("trace", "--help").stdout
    for name in PRESETS:
        assert name in help_text
    cuda_home = flashinfer_emulation.make_toolkit(tmp_path, emulated_presets()[0])
    listed = subprocess.run([str(cuda_home / "bin" / "nvcc"), "--list-gpu-arch"], capture_output=True,
                            text=True).stdout.split()
    for p in emulated_presets():
        assert f"compute_{p.major}{p.minor}" in listed


def test_providers_own_their_options(cli):
    from graphbreak_doctor.targets.registry import PROVIDERS

    flags = [o.flag for p in PROVIDERS for o in p.options]
    assert len(flags) == len(set(flags))
    help_text = cli("trace", "--help").stdout
    for p in PROVIDERS:
        assert p.title in help_text
        assert any(o.selects for o in p.options)
    result = cli("trace", "--target", "fixtures.breaks.clean:target", "--tp", "2")
    assert result.returncode == 2 and "--tp applies to --layer" in result.stderr


def test_readme_category_table_is_the_registry():
    from graphbreak_doctor.analysis import categories

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("\n## Break categories", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    assert [(name.strip().strip("`"), evidence.strip()) for name, evidence in rows] == [
        (c.name, c.evidence) for c in categories.REGISTRY
    ]
