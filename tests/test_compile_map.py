"""The compile map's parts that need no SGLang: torch.compile recorded in
every form code uses it, each region traced with its own options, the
renderers, and --sglang-args refused where it cannot apply. SGLang's own
compile map is in test_sglang_compile_map.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import torch
from markupsafe import escape

from graphbreak_doctor.capture.regions import CompileRecorder
from graphbreak_doctor.compile_map import trace_region
from graphbreak_doctor.model import REGION_BREAKS, REGION_FAILS, REGION_OK, Findings, TargetInfo
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.render import get
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.serving import PROVIDER

HAS_SGLANG = importlib.util.find_spec("sglang") is not None


def _library():
    """Code shaped like a framework's: decorated helpers, a decorated method,
    a compiled module and a call-form compile, made while the recorder is on."""
    @torch.compile(dynamic=True, backend="eager")
    def gate(x, scale):
        return torch.sigmoid(x) * scale

    @torch.compile(backend="eager")
    def chatty(x):
        print("chatty", flush=True)
        return x * 2

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        @torch.compile(fullgraph=True, backend="eager")
        def probe(self, x):
            return subprocess.check_output(["true"]) and self.proj(x)

        def forward(self, x):
            return gate(self.proj(x), 2.0)

    def never(x):
        return x + 1

    layer = Layer()
    compiled_layer = torch.compile(layer, dynamic=False, backend="eager")
    torch.compile(never, fullgraph=True)
    return gate, chatty, layer, compiled_layer


def test_every_form_of_torch_compile_is_recorded_and_counted_per_phase():
    recorder = CompileRecorder()
    real = torch.compile
    with UndoLog() as log:
        recorder.install(log)
        gate, chatty, layer, compiled_layer = _library()
        with recorder.phase("extend"):
            compiled_layer(torch.ones(3, 4))
        with recorder.phase("decode"):
            gate(torch.ones(5, 4), 1.0)
            gate(torch.ones(7, 4), 1.0)
        gate(torch.ones(2, 4), 1.0)  # outside any phase: not counted
    assert torch.compile is real
    by_name = {s.name.rsplit(".", 1)[-1]: s for s in recorder.sites}
    assert set(by_name) == {"gate", "chatty", "probe", "forward", "never"}
    assert by_name["gate"].options == {"dynamic": True, "backend": "eager"}
    # The compiled layer's call of gate is part of the layer's graph (Dynamo
    # traced it inline), not a call of the phase's own.
    assert by_name["gate"].calls == {"decode": 2}
    assert by_name["gate"].shapes["decode"] == ["[5, 4]", "[7, 4]"]
    assert by_name["forward"].calls == {"extend": 1} and by_name["forward"].options == {"dynamic": False, "backend": "eager"}
    assert by_name["probe"].options == {"fullgraph": True, "backend": "eager"} and not by_name["probe"].entered
    assert not by_name["never"].entered and not by_name["chatty"].entered
    assert by_name["gate"].file == __file__ and by_name["probe"].line > by_name["gate"].line
    # The wrappers keep working once the recorder is gone, as the functions did.
    assert torch.equal(gate(torch.zeros(1, 4), 3.0), torch.full((1, 4), 1.5))


def _decode_run() -> tuple[CompileRecorder, torch.nn.Module]:
    """The library built with the recorder on, and a decode phase that calls
    its gate and its chatty helper; the layer, for calls of its own."""
    recorder = CompileRecorder()
    with UndoLog() as log:
        recorder.install(log)
        gate, chatty, layer, _ = _library()
        with recorder.phase("decode"):
            gate(torch.ones(5, 4), 1.0)
            chatty(torch.ones(3))
    return recorder, layer


def test_each_region_is_traced_with_its_own_options():
    recorder, layer = _decode_run()
    # A phase after the recorder left still counts calls; the server's own
    # call of the fullgraph region fails as the traced one does.
    with recorder.phase("extend"), pytest.raises(torch._dynamo.exc.Unsupported):
        layer.probe(torch.ones(2, 4))
    regions = {r.function.rsplit(".", 1)[-1]: r for r in map(trace_region, recorder.sites)}
    assert regions["gate"].traced == "explain" and regions["gate"].verdict == REGION_OK
    assert regions["gate"].graphs == 1 and regions["gate"].breaks == []
    chatty_region = regions["chatty"]
    assert chatty_region.verdict == REGION_BREAKS
    assert [b.category for b in chatty_region.breaks] == ["logging"]
    probe = regions["probe"]
    assert probe.traced == "fullgraph" and probe.verdict == REGION_FAILS
    assert probe.breaks and probe.breaks[0].category == "subprocess", [b.category for b in probe.breaks]
    assert regions["never"].traced == "" and regions["never"].verdict == ""


def test_the_map_is_in_the_json_the_summary_and_the_report(tmp_path):
    recorder, _ = _decode_run()
    findings = Findings(target=TargetInfo(spec="library", title="library",
                                          facts={"launch": {"arguments": ["--enable-torch-compile"],
                                                            "phases": {"decode": "full CUDA graph"}}}),
                        regions=[trace_region(s) for s in recorder.sites])
    again = Findings.from_json(findings.to_json())
    assert again.to_json() == findings.to_json() and again.regions[0].calls == {"decode": 1}
    text = get("terminal").render(again)
    assert "compile map (launch arguments: --enable-torch-compile):" in text
    assert "decode: full CUDA graph" in text
    assert "test_compile_map._library.<locals>.gate" in text and "traced: graph breaks" in text
    assert "3 regions registered (torch.compile called) that no phase entered" in text
    html = get("html").render(again)
    assert 'id="compile-map"' in html and "_library.&lt;locals&gt;.chatty" in html
    # Where a break stops the server, as the terminal says it.
    line = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith("fullgraph=True: "))
    assert f'<p id="compile-map-fullgraph"><strong>{escape(line)}</strong></p>' in html
    # The map alone (--mode map): its verdict is its regions', in every output.
    alone = Findings.from_json(findings.to_json())
    alone.modes = ["map"]
    assert "compile map: 2 regions the launch's phases entered: 1 ok, 1 graph breaks" in get("terminal").render(alone)
    assert "fullgraph not run" not in get("html").render(alone)
    assert "<strong>compile map</strong>: 2 regions the launch" in get("html").render(alone)
    # Without regions (a layer's trace) the launch's phases are shown, not called a map.
    layer = Findings.from_json(findings.to_json())
    layer.regions = []
    assert "<h2>Launch</h2>" in get("html").render(layer) and "Compile map" not in get("html").render(layer)
    assert "compile-map-fullgraph" not in get("html").render(layer)
    # Findings from elsewhere may hold anything under facts: no crash.
    hostile = Findings.from_json(findings.to_json().replace('"arguments": [', '"arguments": 7, "x": ['))
    assert "compile map (default launch arguments)" in get("terminal").render(hostile)


def test_sglang_args_are_split_as_a_shell_does():
    launch_arguments = registry.get("sglang").split_launch
    assert launch_arguments("--enable-torch-compile --torch-compile-max-bs 8", None) == (
        ("--enable-torch-compile", "--torch-compile-max-bs", "8"), None)
    assert launch_arguments("--model-path /m --tp-size 1", None) == (("--tp-size", "1"), "/m")
    assert launch_arguments("--model-path=/m", None) == ((), "/m")
    for text, says in (("--x 'unclosed", "No closing quotation"), ("   ", "empty"),
                       ("--model-path", "needs a value")):
        with pytest.raises(ValueError, match=says):
            launch_arguments(text, None)
    with pytest.raises(ValueError, match="give one"):
        launch_arguments("--model-path /m", "/other")


@pytest.mark.skipif(HAS_SGLANG, reason="checks the refusal where SGLang is not installed")
def test_sglang_args_without_sglang_is_one_line(cli, tmp_path):
    out = tmp_path / "f.json"
    result = cli("trace", "--layer", "dense", "--sglang-args", "--enable-torch-compile", "--json", str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "needs SGLang installed" in result.stderr
    assert not out.exists()
    with pytest.raises(ValueError, match="needs SGLang installed"):
        PROVIDER.select({"layer": "dense", "sglang_args": "--enable-torch-compile"})


def test_a_region_compiled_again_per_size_is_one_region_and_its_recompiles_say_why():
    """A graph runner compiles the same forward once per batch size with
    static shapes: one region, each later size a recompile with Dynamo's own
    guard-failure reason."""
    recorder = CompileRecorder()

    def forward(x):
        return torch.relu(x) + 1

    with UndoLog() as log:
        recorder.install(log)
        with recorder.phase("decode"):
            for size in (1, 4, 8):
                torch.compile(forward, dynamic=False, backend="eager")(torch.ones(size, 3))
    (site,) = [s for s in recorder.sites if s.name.endswith("forward")]
    assert site.calls == {"decode": 3} and site.shapes["decode"] == ["[1, 3]", "[4, 3]", "[8, 3]"]
    assert [r["shapes"] for r in site.recompiles] == ["[4, 3]", "[8, 3]"]
    assert all("size mismatch" in reason and reason.startswith("forward: ")
               for r in site.recompiles for reason in r["reasons"]), site.recompiles
    region = trace_region(site)
    assert region.recompiles == site.recompiles and region.verdict == REGION_OK
    text = "\n".join(get("terminal").render(Findings(target=TargetInfo(spec="s", title="s"), regions=[region]))
                     .splitlines())
    assert "recompiled 2 times while its phases ran:" in text and "decode at [4, 3]: forward: " in text


def _gated(regions, baseline=None, **policy):
    from graphbreak_doctor.gate.policy import Policy, evaluate

    findings = Findings(target=TargetInfo(spec="model", title="model"), modes=["map"], regions=regions)
    return evaluate("model", findings, Policy(**policy), baseline)


def test_the_gate_checks_each_entered_region():
    from graphbreak_doctor.gate import baseline as baselines

    recorder, layer = _decode_run()
    with recorder.phase("extend"), pytest.raises(torch._dynamo.exc.Unsupported):
        layer.probe(torch.ones(2, 4))
    regions = [trace_region(s) for s in recorder.sites]
    result = _gated(regions)
    cases = {c.mode.rsplit(".", 1)[-1]: c for c in result.cases}
    # Only entered regions are checks; the map mode itself is not one.
    assert set(cases) == {"gate", "chatty", "probe"}
    assert cases["gate"].passed
    assert [f.check for f in cases["probe"].failures] == ["region", "max-breaks"]
    assert [f.check for f in cases["chatty"].failures] == ["max-breaks"]
    # Accepted as they are: the same map passes; a new region, a worse verdict
    # or more breaks fail.
    accepted = baselines.target_baseline(result.findings, "map")
    assert {r.function.rsplit(".", 1)[-1]: r.verdict for r in accepted.regions} == {
        "gate": REGION_OK, "chatty": REGION_BREAKS, "probe": REGION_FAILS}
    again = baselines.parse(json.loads(baselines.Baseline(device="cpu", targets=[accepted]).to_json()))
    assert all(c.passed for c in _gated(regions, again.targets[0]).cases if "probe" not in c.mode)
    fewer = baselines.TargetBaseline("model", "map", regions=[r for r in again.targets[0].regions
                                                              if not r.function.endswith("chatty")])
    assert [c.failures[0].reason for c in _gated(regions, fewer).cases if c.mode.endswith("chatty")] == [
        "a region the baseline does not list"]
    better = baselines.TargetBaseline("model", "map", regions=[
        baselines.RegionEntry(r.function, REGION_OK, 0) for r in again.targets[0].regions])
    worse = {c.mode.rsplit(".", 1)[-1]: c.failures[-1].reason for c in _gated(regions, better).cases if c.failures}
    assert worse["chatty"] == "verdict 'graph breaks', worse than the baseline's 'ok'"
    with pytest.raises(baselines.BaselineError, match="'verdict' must be one of"):
        baselines.parse({**json.loads(again.to_json()), "targets": [{"target": "model", "entries": [],
                                                                     "regions": [{"function": "f", "verdict": "meh"}]}]})


@torch.library.custom_op("graphbreak_doctor_test::split_here", mutates_args=())
def _split_here(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_split_here.register_fake
def _(x):
    return torch.empty_like(x)


def _piecewise_backend(gm, example_inputs):
    """A framework's own backend (one that would cut the graph at its split ops)."""
    return gm.forward


def test_a_fullgraph_region_with_a_piecewise_backend_is_traced_as_its_pieces():
    """A graph runner that compiles its forward with fullgraph=True and a
    backend of its own that cuts the graph at split ops (SGLang's tc_piecewise
    runner): the map counts the pieces; a region with one of torch's backends,
    or one whose trace fails, has none."""
    recorder = CompileRecorder()

    def forward(x):
        y = torch.relu(x) + 1
        y = torch.ops.graphbreak_doctor_test.split_here(y)
        return y * 2

    def broken(x):
        print("a side effect", flush=True)
        return torch.ops.graphbreak_doctor_test.split_here(x)

    with UndoLog() as log:
        recorder.install(log)
        with recorder.phase("extend"):
            torch.compile(forward, fullgraph=True, backend=_piecewise_backend)(torch.ones(4, 3))
            torch.compile(forward, fullgraph=True, backend="eager")(torch.ones(4, 3))
            with pytest.raises(torch._dynamo.exc.Unsupported):
                torch.compile(broken, fullgraph=True, backend=_piecewise_backend)(torch.ones(4, 3))
    split = ("graphbreak_doctor_test::split_here",)
    own, plain, failed = (trace_region(s, split_ops=split) for s in recorder.sites)
    # One run of ops, the split op, another run: three pieces.
    assert own.verdict == REGION_OK and own.split_ops == list(split) and own.pieces == 3
    assert own.options["backend"].endswith("test_compile_map._piecewise_backend")
    assert plain.verdict == REGION_OK and plain.split_ops == [] and plain.pieces == 0
    assert failed.verdict == REGION_FAILS and failed.split_ops == list(split) and failed.pieces == 0
    text = get("terminal").render(Findings(target=TargetInfo(spec="s", title="s"), regions=[own, failed]))
    assert "piecewise backend: the graph is cut into 3 pieces at graphbreak_doctor_test::split_here" in text
    assert "piecewise backend: no pieces: no graph was captured" in text
    html = get("html").render(Findings(target=TargetInfo(spec="s", title="s"), regions=[own]))
    assert "piecewise backend: the graph is cut into 3 pieces" in html


def test_a_trace_with_its_map_shows_the_phases_as_the_map_ran_them():
    """`trace --model` (explain + fullgraph + the map, each in its own worker):
    the joined findings keep the map's account of the launch's phases (what
    the map added while it ran them), not the trace's resolved-only lines."""
    from graphbreak_doctor.analysis.assemble import join
    from graphbreak_doctor.model import MAP_MODE

    resolved = {"arguments": [], "phases": {"extend": "tc_piecewise CUDA graph (fullgraph)"}}
    ran = {"arguments": [], "phases": {"extend": "tc_piecewise CUDA graph (fullgraph); compiled by SGLang's ..."}}
    trace = Findings(target=TargetInfo(spec="m", title="m", facts={"launch": resolved}), modes=["fullgraph"])
    from graphbreak_doctor.model import Region
    from graphbreak_doctor.frames import make_frame

    forward = Region(function="models.m.Model.forward", site=make_frame("m.py", 3, "forward"),
                     options={"fullgraph": True}, calls={"extend": 1})
    mapped = Findings(target=TargetInfo(spec="m", title="m", facts={"launch": ran}), modes=[MAP_MODE],
                      regions=[forward])
    merged = join([trace, mapped])
    assert merged.target.facts["launch"] == ran and merged.modes == ["fullgraph"]
    text = get("terminal").render(merged)
    assert "compiled by SGLang's ..." in text
    # The forward a fullgraph phase compiles is named once, as that phase's.
    assert "compiles the extend forward with fullgraph=True" in text, text
    forward.calls = {"extend": 1, "decode": 2}  # entered outside the fullgraph phase too: named
    assert "compiles the extend forward, Model.forward with fullgraph=True" in get("terminal").render(merged)


def test_a_map_whose_phases_stop_keeps_what_they_recorded_and_never_passes_the_gate():
    """A framework that resolves its launch, then fails to build its model
    here: the map is crashed with the error, keeps the launch's phase lines,
    renders them, and fails the gate (it read no region)."""
    from graphbreak_doctor.compile_map import PhasesStopped, map_regions
    from graphbreak_doctor.gate.policy import Policy, evaluate
    from graphbreak_doctor.render.terminal import render
    from graphbreak_doctor.targets import Target

    def build(log):
        target = Target(fn=lambda: None, info=TargetInfo(spec="server", function="server"))

        def discover(log, phase_scope):
            target.info.facts["launch"] = {"phases": {"extend": "no prefill CUDA graph"},
                                           "sglang_said": ["piecewise capture is off for this model"]}
            with phase_scope("extend"):
                raise AttributeError("'ModuleNotFoundError' object has no attribute 'get_num_sms'")

        target.discover = discover
        return target

    with pytest.raises(PhasesStopped) as stopped:
        map_regions(build, device="sm120")
    found = stopped.value.findings
    assert isinstance(stopped.value.__cause__, AttributeError)
    assert found.outcome == "crashed" and found.fullgraph.crashed and not found.regions
    # The stop says where it was raised: here, the target's own discover.
    said, _, where = found.fullgraph.error.partition(" (raised at ")
    assert said == "the phases stopped: AttributeError: 'ModuleNotFoundError' object has no attribute 'get_num_sms'"
    assert where.startswith("test_compile_map.py:") or "/test_compile_map.py:" in where, where
    assert where.endswith(" in discover)"), where
    assert found.device["emulated"]
    text = render(Findings.from_dict(json.loads(json.dumps(found.to_dict()))))
    assert "  extend: no prefill CUDA graph" in text
    assert "SGLang said: piecewise capture is off for this model" in text
    assert "compile map: not made" in text
    result = evaluate("server", found, Policy())
    assert not result.passed and [c.mode for c in result.cases] == ["map"]


def test_a_rule_that_changes_a_compile_field_is_told_with_its_line_and_condition():
    """launch.rules: what a server-arguments class's own code changes while
    it resolves (a field that already held a value), with the function, the
    line and the if-conditions around it, read from the source."""
    import dataclasses

    from graphbreak_doctor.targets.frameworks.sglang.launch import rules

    @dataclasses.dataclass
    class Args:
        architecture: str = "GlmMoeDsaForCausalLM"
        disable_piecewise_cuda_graph: bool = False
        cuda_graph_max_bs: int | None = None
        attention_backend: str = "auto"

        def __post_init__(self):
            self.attention_backend = "dsa"  # not a compile field: not told
            if self.cuda_graph_max_bs is None:  # a default filled in: not told
                self.cuda_graph_max_bs = 256
            if self.architecture.startswith("Glm"):
                if self.attention_backend == "dsa":
                    self.disable_piecewise_cuda_graph = True
            else:
                self.disable_piecewise_cuda_graph = False  # no change: not told

    with rules(Args) as found:
        Args()
    assert "__setattr__" not in vars(Args)  # undone
    line = Args.__post_init__.__code__.co_firstlineno + 6
    assert found == [f"disable_piecewise_cuda_graph = True by __post_init__ (test_compile_map.py:{line}) when "
                     "`self.architecture.startswith(\"Glm\") and self.attention_backend == \"dsa\"`"]


# A release's list of architectures a compile path is off for, and its predicate
# (the shape SGLang's model config gives them).
_NO_PIECEWISE_ARCHS = ["SomeOtherForCausalLM", "GlmMoeDsaForCausalLM"]


def _is_no_piecewise_model(architectures):
    return any(a in _NO_PIECEWISE_ARCHS for a in architectures)


def test_a_rule_whose_condition_reads_an_architecture_list_names_the_model(tmp_path):
    """A rule whose condition calls a function of the rule's own package that
    reads a module list holding the model's architecture (config.json in the
    model folder) says which list, and where it is written."""
    import dataclasses
    import json

    from graphbreak_doctor.targets.frameworks.sglang.launch import rules

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GlmMoeDsaForCausalLM"]}))

    @dataclasses.dataclass
    class Args:
        model_path: str
        disable_piecewise_cuda_graph: bool = False

        def __post_init__(self):
            architectures = json.loads((tmp_path / "config.json").read_text())["architectures"]
            if _is_no_piecewise_model(architectures):
                self.disable_piecewise_cuda_graph = True

    with rules(Args) as found:
        Args(str(tmp_path))
    listed = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                  if text.startswith("_NO_PIECEWISE_ARCHS ="))
    (line,) = found
    assert line.endswith(f"when `_is_no_piecewise_model(architectures)` (GlmMoeDsaForCausalLM is in "
                         f"_NO_PIECEWISE_ARCHS (test_compile_map.py:{listed}))"), line

    with rules(Args) as found:  # a model folder without config.json: the condition alone
        Args(str(tmp_path / "elsewhere"))
    assert [text.split(" when ")[1] for text in found] == ["`_is_no_piecewise_model(architectures)`"]


def test_a_region_with_nothing_to_capture_says_so():
    """A region whose call ran no tensor operation: Dynamo makes no graph of
    it, and the map says why its verdict comes with 0 graphs."""
    from graphbreak_doctor.render.compile_map import rows

    recorder = CompileRecorder()
    with UndoLog() as log:
        recorder.install(log)

        @torch.compile(dynamic=True, backend="eager")
        def postprocess(ids, info=None):
            if info is None:  # nothing to remap: no tensor work
                return ids
            return ids + info

        with recorder.phase("extend"):
            postprocess(torch.ones(4, 8))
    (region,) = [trace_region(s) for s in recorder.sites if s.entered]
    assert region.verdict == REGION_OK and region.graphs == 0
    (row,) = rows(Findings(regions=[region]))
    assert row.verdict == "ok (nothing to capture: the traced call ran no tensor operation)"
