"""Hostile input: the gate never passes on input it did not read, no input
is ever overwritten, nothing from findings drives the terminal or reads
files here.

The cases, numbered; each test is named after its case (caseNN_...):
 1. findings JSON recognised by parsing (sorted keys, BOM, gzip, zstd), not
    by a byte prefix; a JSON document that is not findings is an error;
 2. a cut zstd file is reported like a cut gzip one;
 3. a gate that checked nothing does not pass (exit 5);
 4. an output that is, or resolves to, an input is refused before anything runs;
 5. outputs that are not regular files (devices, FIFOs) are written in place,
    sockets and folders refused;
 6. workers die with the doctor; a killed run's leftovers are removed by the next;
 7. deeply nested JSON and a zstd dictionary mismatch are one line, exit 2;
 8. a FIFO input is refused at once; a symlink loop says so;
 9. a NUL byte in a frame's path is shown escaped;
10. bad --config values are usage errors;
11. a baseline written from CPU findings is for the CPU;
12. SIGTERM outside the worker pool is one line, exit 143;
13. an unwritable output is refused before the trace;
14. smaller messages: a path as --target, --tp that does not divide, a
    generator's break site, a crash's device, a native crash report held back;
15. `report` shows only the source lines the findings carry;
16. no control character from findings or logs reaches the terminal;
17. a target's patches to torch.cuda are put back.

These run the command line in this process, on findings and logs written
here (no trace but where a case is about tracing). The cases about
processes -- signals, killed runs, FIFOs, crashing workers -- are in
test_hostile_processes.py.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import stat
import textwrap
from xml.etree import ElementTree

import pytest

from graphbreak_doctor.model import Findings
from hostile_material import (RECORD, graph_break_log, main, make_findings, one_error_line,
                              write_findings)



def _zstd():
    return pytest.importorskip("zstandard")  # reading zstd needs it (the `zstd` extra); ci.txt installs it


# ------------------------------------------------- silent wrong results


def test_case01_sorted_keys_bom_and_compressed_findings_are_gated(tmp_path, capsys):
    zstandard = _zstd()
    data = make_findings(1).to_dict()
    plain = json.dumps(data, sort_keys=True, indent=2).encode()
    variants = {
        "sorted.json": plain,
        "bom.json": b"\xef\xbb\xbf" + make_findings(1).to_json().encode(),
        "findings.json.gz": gzip.compress(plain),
        "findings.json.zst": zstandard.ZstdCompressor().compress(plain),
    }
    for name, content in variants.items():
        (tmp_path / name).write_bytes(content)
        code, out, _err = main(capsys, "check", "--from", tmp_path / name)
        assert code == 1 and "gate: FAILED (1 of 1" in out, (name, out)
    good = write_findings(tmp_path / "good.json", make_findings(0))
    code, out, _err = main(capsys, "diff", good, tmp_path / "sorted.json", "--fail-on-new")
    assert code == 1 and "1 only in B" in out


def test_case01_json_that_is_not_findings_is_an_error_not_an_empty_log(tmp_path, capsys):
    (tmp_path / "baseline.json").write_text(json.dumps({"device": "cpu", "targets": []}, sort_keys=True))
    code, _out, err = main(capsys, "check", "--from", tmp_path / "baseline.json")
    assert code == 2 and "not graphbreak-doctor findings" in one_error_line(err)


def test_case02_cut_zstd_log_is_reported_like_cut_gzip(tmp_path, capsys):
    zstandard = _zstd()
    text = graph_break_log(400).encode()  # several zstd blocks: the first ones decode before the cut
    for name, packed in (("log.gz", gzip.compress(text)), ("log.zst", zstandard.ZstdCompressor().compress(text))):
        (tmp_path / name).write_bytes(packed[: int(len(packed) * 0.8)])
        # Whatever was read before the cut is within budget: only the cut can fail the gate.
        code, out, _err = main(capsys, "check", "--from", tmp_path / name, "--max-breaks", "999")
        assert code == 3, (name, out)
        assert "ends" in out and "early" in out, (name, out)


def test_case02_zstd_of_several_frames_is_read_to_the_end(tmp_path, capsys):
    zstandard = _zstd()
    first, second = graph_break_log(2).encode(), RECORD.format(file="/srv/app/late.py", line=99, extra="").encode()
    packer = zstandard.ZstdCompressor()
    (tmp_path / "two.zst").write_bytes(packer.compress(first) + packer.compress(second))
    code, out, _err = main(capsys, "ingest", tmp_path / "two.zst", "--no-html")
    assert code == 0 and "late.py:99" in out


def test_case03_a_gate_that_checked_nothing_does_not_pass(tmp_path, capsys):
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "noise.log").write_bytes(os.urandom(1 << 20).hex().encode())  # 2 MiB, no newline
    # The report sits past the 1 MiB line cut: it is never read.
    (tmp_path / "long-line.log").write_text("x" * (3 << 20) + " " + graph_break_log(1).replace("\n", "\r"))
    write_findings(tmp_path / "no-modes.json", make_findings(0, modes=[]))
    for name in ("empty.log", "noise.log", "long-line.log", "no-modes.json"):
        code, out, err = main(capsys, "check", "--from", tmp_path / name, "--junit", tmp_path / "gate.xml")
        assert code == 5, (name, out, err)
        line = one_error_line(err)
        assert line.startswith(f"graphbreak-doctor: nothing to gate: no Dynamo report in {tmp_path / name}")
        assert "passed" not in out and not (tmp_path / "gate.xml").exists()
    a = write_findings(tmp_path / "a.json", make_findings(1))
    code, _out, err = main(capsys, "diff", a, tmp_path / "empty.log", "--fail-on-new")
    assert code == 5 and "nothing to gate" in one_error_line(err)
    code, _out, err = main(capsys, "baseline", "write", "--from", tmp_path / "empty.log", "-o", tmp_path / "b.json")
    assert code == 5 and not (tmp_path / "b.json").exists()


# ---------------------------------------------------------------- data lost


def test_case04_an_output_that_is_an_input_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    findings = write_findings(tmp_path / "g.json", make_findings(1))
    other = write_findings(tmp_path / "other.json", make_findings(0))
    (tmp_path / "in.log").write_text(graph_break_log(1))
    (tmp_path / "b.json").write_text(json.dumps({"schema_version": 1, "device": "cpu", "targets": [
        {"target": "t", "mode": "explain", "entries": []}]}))
    (tmp_path / "link.json").symlink_to("g.json")
    os.link(tmp_path / "g.json", tmp_path / "hard.json")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    cases = [
        ("report", "g.json", "--html", "g.json"),
        ("report", "g.json", "--html", "./link.json"),
        ("report", "g.json", "--html", "hard.json"),
        ("ingest", "in.log", "--json", "in.log", "--no-html"),
        ("diff", "g.json", "other.json", "--json", "g.json"),
        ("check", "--from", "g.json", "--baseline", "b.json", "--json", "b.json"),
        ("baseline", "write", "--from", "g.json", "-o", "link.json"),
        ("trace", "--target", "fixtures.breaks.clean:target", "--ladder", "g.json", "--json", "g.json"),
    ]
    for argv in cases:
        code, out, err = main(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert "refusing to overwrite an input" in one_error_line(err), argv
        assert out == "", argv
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before, argv
    assert (tmp_path / "link.json").is_symlink() and not (tmp_path / "reports").exists()
    assert findings.read_bytes() == before["g.json"] and other.exists()


def test_case05_outputs_that_are_not_regular_files_are_written_in_place(tmp_path, capsys):
    findings = write_findings(tmp_path / "g.json", make_findings(1))
    null = tmp_path / "null"
    null.symlink_to("/dev/null")  # a character device, through a link (the link must stay)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open does not wait
    try:
        code, out, err = main(capsys, "check", "--from", findings, "--json", fifo, "--junit", null,
                              "--sarif", tmp_path / "null")
        assert code == 1, out + err
        written = b""
        while chunk := os.read(reader, 1 << 16):
            written += chunk
    finally:
        os.close(reader)
    assert json.loads(written)["breaks"][0]["id"] == make_findings(1).breaks[0].id
    assert null.is_symlink() and os.readlink(null) == "/dev/null"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "g.json", "null"]  # no temporary file left


def test_case05_a_socket_or_a_folder_is_refused(tmp_path, capsys):
    import socket

    findings = write_findings(tmp_path / "g.json", make_findings(1))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        code, _out, err = main(capsys, "check", "--from", findings, "--json", tmp_path / "s")
        assert code == 2 and "not a regular file" in one_error_line(err)
    finally:
        sock.close()
    code, _out, err = main(capsys, "check", "--from", findings, "--json", tmp_path)
    assert code == 2 and "is a folder" in one_error_line(err)


# ---------------------------------------------------- misleading codes and messages


def test_case07_deeply_nested_json_is_one_line_exit_2(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    deeper = tmp_path / "deeper.json"
    deeper.write_text('{"a": ' * 200_000)
    good = write_findings(tmp_path / "g.json", make_findings(1))
    for argv in [("report", deep, "--html", tmp_path / "r.html"), ("report", deeper, "--html", tmp_path / "r.html"),
                 ("check", "--from", good, "--baseline", deep), ("diff", deep, good), ("diff", good, deeper),
                 ("check", "--from", deeper)]:
        code, _out, err = main(capsys, *argv)
        assert code == 2 and "nested too deeply" in one_error_line(err), argv


def test_case07_zstd_dictionary_mismatch_is_one_line_exit_2(tmp_path, capsys):
    zstandard = _zstd()
    samples = [f"graph break {i} at /srv/app/model.py:{i}".encode() for i in range(2000)]
    dictionary = zstandard.train_dictionary(2048, samples)
    packed = zstandard.ZstdCompressor(dict_data=dictionary).compress(graph_break_log(3).encode())
    (tmp_path / "dict.zst").write_bytes(packed)
    code, _out, err = main(capsys, "ingest", tmp_path / "dict.zst", "--no-html")
    assert code == 2 and "zstd" in one_error_line(err)


def test_case08_a_symlink_loop_says_so(tmp_path, capsys):
    (tmp_path / "loop").symlink_to("loop")
    code, _out, err = main(capsys, "ingest", tmp_path / "loop", "--no-html")
    assert code == 2 and "symbolic links" in one_error_line(err)


def _nul_findings() -> Findings:
    f = make_findings(1)
    site = dataclasses.replace(f.breaks[0].site, file="/srv/app/a\x00b.py")
    f.breaks[0] = dataclasses.replace(f.breaks[0], site=site, actionable_frame=site, stack=[site])
    return f


def test_case09_a_nul_byte_in_a_path_is_shown_escaped(tmp_path, capsys):
    nul = write_findings(tmp_path / "nul.json", _nul_findings())
    code, _out, err = main(capsys, "report", nul, "--html", tmp_path / "r.html")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "\x00" not in page and "a\\x00b.py" in page
    good = write_findings(tmp_path / "g.json", make_findings(0))
    code, _out, err = main(capsys, "diff", good, nul, "--html", tmp_path / "d.html")
    assert code == 0, err
    page = (tmp_path / "d.html").read_text()
    assert "\x00" not in page and "a\\x00b.py" in page
    code, out, err = main(capsys, "check", "--from", nul)
    assert code == 1 and "a\\x00b.py" in out and "\x00" not in out + err


@pytest.mark.parametrize("value", ['"big"', "-6144", "true", "0.5"])
def test_case10_bad_config_values_are_usage_errors(tmp_path, capsys, value):
    from graphbreak_doctor.targets.models.glm5.config import default_config_dir

    text = (default_config_dir() / "config.json").read_text().replace('"hidden_size": 6144', f'"hidden_size": {value}')
    (tmp_path / "config.json").write_text(text)
    code, out, err = main(capsys, "trace", "--layer", "dense", "--impl", "reference", "--config", tmp_path,
                          "--no-html")
    assert code == 2 and out == "", out + err
    line = one_error_line(err)
    assert "'hidden_size' must be a positive integer" in line and line.endswith(f"got {json.loads(value)!r}")


def test_case11_a_baseline_written_from_cpu_findings_is_for_cpu(tmp_path, capsys):
    import argparse

    from graphbreak_doctor.cli import check

    findings = write_findings(tmp_path / "cpu.json", make_findings(1))
    code, out, err = main(capsys, "baseline", "write", "--from", findings, "-o", tmp_path / "b.json")
    assert code == 0 and "(cpu, explain)" in out, err
    assert json.loads((tmp_path / "b.json").read_text())["device"] == "cpu"
    # What `check --device cpu --baseline b.json` accepts.
    assert check._baseline(argparse.Namespace(baseline=str(tmp_path / "b.json"), device="cpu", from_path=None))


def test_case13_an_unwritable_output_is_refused_before_the_trace(tmp_path, capsys):
    if os.access("/proc", os.W_OK) is False and os.geteuid() != 0:
        pass  # refused either way; the point is that it is refused before tracing
    code, out, err = main(capsys, "trace", "--target", "fixtures.breaks.clean:target", "--device", "cpu",
                          "--in-process", "--no-html", "--json", "/proc/x.json")
    assert code == 2 and out == "", out
    assert "/proc" in one_error_line(err)
    (tmp_path / "in.log").write_text(graph_break_log(1))
    code, out, err = main(capsys, "ingest", tmp_path / "in.log", "--no-html", "--json", "/proc/y.json")
    assert code == 2 and out == "" and "/proc" in one_error_line(err)


# ------------------------------------------------------ case 14: the last round


def test_case14_a_path_as_target_is_not_imported(capsys):
    code, _out, err = main(capsys, "trace", "--target", "../../etc:passwd", "--device", "cpu", "--in-process",
                           "--no-html")
    line = one_error_line(err)
    assert code == 2 and "is not a module name" in line
    assert "TypeError" not in line and "relative import" not in line


def test_case14_tp_that_does_not_divide_says_which_size(capsys):
    code, out, err = main(capsys, "trace", "--layer", "dense", "--impl", "reference", "--tp", "3", "--no-html")
    line = one_error_line(err)
    assert code == 2 and out == ""
    assert "--tp 3 does not divide num_attention_heads=64 evenly" in line and "multiple of 1" not in line


def test_case14_a_generator_function_target_has_a_site(tmp_path, monkeypatch):
    from graphbreak_doctor.diagnose import diagnose, target_builder

    (tmp_path / "gen_target.py").write_text(textwrap.dedent("""\
        import torch


        def numbers(x):
            yield x + 1
            yield x * 2


        def target():
            return numbers, (torch.ones(4),)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    findings = diagnose(target_builder("gen_target:target"), mode="fullgraph", device="cpu")
    first = findings.break_by_id(findings.fullgraph.break_id)
    assert first is not None and findings.fullgraph.ok is False
    assert first.site.file.endswith("gen_target.py") and first.site.line == 4, first.site
    assert first.package == "gen_target" and first.actionable_frame.qualname == "numbers"


# ------------------------------------------------------- risks no promise covered


def test_case15_report_shows_only_the_source_the_findings_carry(tmp_path, capsys):
    secret = tmp_path / "secret.py"
    secret.write_text("first line\nSECRET-TOKEN-4711 = 1\nthird line\n")
    f = make_findings(1)
    site = dataclasses.replace(f.breaks[0].site, file=str(secret), line=2, code="")
    f.breaks[0] = dataclasses.replace(f.breaks[0], site=site, actionable_frame=site, stack=[site])
    data = f.to_dict()
    recorded = dataclasses.replace(f.breaks[0].site, file="/elsewhere/model.py", line=9)
    data["breaks"].append({**data["breaks"][0], "id": "recorded01",
                           "site": dataclasses.asdict(recorded), "actionable_frame": dataclasses.asdict(recorded),
                           "excerpts": [{"file": "/elsewhere/model.py", "first": 8,
                                         "lines": ["def layer(x):", "    RECORDED-LINE-9", "    return x"]}]})
    (tmp_path / "f.json").write_text(json.dumps(data))
    code, _out, err = main(capsys, "report", tmp_path / "f.json", "--html", tmp_path / "r.html")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "SECRET-TOKEN-4711" not in page
    assert "RECORDED-LINE-9" in page and "def layer(x):" in page


def test_case15_a_trace_records_the_lines_the_report_shows():
    from graphbreak_doctor.diagnose import diagnose, target_builder

    findings = diagnose(target_builder("fixtures.breaks.subprocess_call:target"), mode="explain", device="cpu")
    b = findings.breaks[0]
    around = b.excerpt_for(b.actionable_frame)
    assert around is not None and any("subprocess.check_output(" in line for line in around.lines)
    assert len(around.lines) > 1 and b.excerpt_for(b.site) is not None
    assert Findings.from_json(findings.to_json()).breaks[0].excerpts == b.excerpts


_HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\u202e"


def _raw_controls(text: str) -> list[str]:
    return sorted({c for c in text if not c.isprintable() and c != "\n"})


def test_case16_no_control_character_from_findings_or_logs_reaches_the_terminal(tmp_path, capsys):
    f = make_findings(1)
    f.breaks[0] = dataclasses.replace(f.breaks[0], culprit=_HOSTILE, gb_type="bad" + _HOSTILE)
    f.target.title = "title" + _HOSTILE
    esc = write_findings(tmp_path / "esc.json", f)
    code, out, err = main(capsys, "check", "--from", esc, "--junit", tmp_path / "gate.xml")
    assert code == 1 and not _raw_controls(out + err), (out, err)
    assert "\\x1b]0;pwned\\x07" in out
    ElementTree.parse(tmp_path / "gate.xml")  # still well-formed XML: no control character in it
    (tmp_path / "esc.log").write_text(graph_break_log(1, extra=_HOSTILE))
    for argv in (("ingest", tmp_path / "esc.log", "--no-html"), ("diff", tmp_path / "esc.log", esc),
                 ("report", esc, "--html", tmp_path / "r.html")):
        code, out, err = main(capsys, *argv)
        assert code == 0 and not _raw_controls(out + err), (argv, out, err)
    assert not _raw_controls((tmp_path / "r.html").read_text().replace("\t", ""))
    code, _out, err = main(capsys, "ingest", tmp_path / ("missing" + _HOSTILE))
    assert code == 2 and not _raw_controls(err)


def test_case17_torch_cuda_patches_of_a_target_are_put_back(tmp_path, capsys, monkeypatch):
    import torch

    from graphbreak_doctor.testing import diagnose_call

    (tmp_path / "cuda_patch.py").write_text(textwrap.dedent("""\
        import torch


        def target():
            torch.cuda.is_available = lambda: True
            torch.cuda.device_count = lambda: 8
            torch.cuda.not_a_torch_function = lambda: None
            return (lambda x: x + 1), (torch.ones(2),)
    """))
    monkeypatch.chdir(tmp_path)
    saved = {name: vars(torch.cuda).get(name) for name in ("is_available", "device_count")}

    def patching(x):
        torch.cuda.is_available = lambda: True
        return x * 2

    try:
        # With is_available() true Dynamo tries to save the CUDA RNG state and
        # crashes (exit 3): the patches are put back whatever the outcome.
        code, _out, err = main(capsys, "trace", "--in-process", "--target", "cuda_patch:target", "--device", "cpu",
                               "--mode", "explain", "--no-html")
        assert code in (0, 3), err
        assert torch.cuda.is_available is saved["is_available"]
        assert torch.cuda.device_count is saved["device_count"]
        assert not hasattr(torch.cuda, "not_a_torch_function")
        diagnose_call(patching, torch.ones(2), mode="explain")
        assert torch.cuda.is_available is saved["is_available"]
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)
        vars(torch.cuda).pop("not_a_torch_function", None)
