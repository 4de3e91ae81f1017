"""Wall time and peak RSS of the compile map: discovery (SGLang imported with
torch.compile recorded, the reduced GLM-5 model built, one extend and one
decode forward), tracing every region a phase entered, and the CUDA-graph map
(SGLang's own capture backends at three sizes per captured phase, in the same
worker, of the same model).

Runs `graphbreak-doctor trace --model --mode map` as a user does, once per
model and launch, and reads the peak RSS of the process tree from the kernel
(RUSAGE_CHILDREN: the largest of the doctor and its worker). Targets, for each
packaged model's default launch on a 2-CPU machine: the compile map <= 120 s
and <= 3 GB; with the CUDA-graph map (the same run) <= 150 s and <= 3 GB.

    .venv-sglang/bin/python benchmarks/compile_map.py
    .venv-sglang/bin/python benchmarks/compile_map.py --model-path glm5-nvfp4 --model-path qwen3-30b-a3b
    .venv-sglang/bin/python benchmarks/compile_map.py --launch= --launch=--enable-torch-compile
    .venv-vllm/bin/python benchmarks/compile_map.py --framework vllm --device sm90 --model-path qwen3-30b-a3b

The device matrix (every packaged model on every emulated GPU, default
launch; one command per framework's environment):

    .venv-sglang/bin/python benchmarks/compile_map.py --device all
    .venv-vllm/bin/python benchmarks/compile_map.py --framework vllm --device all

With ``--framework vllm`` the launch is vLLM's (``trace --vllm-args "MODEL
LAUNCH"``): its profile run at the launch's own batch (no --tokens), the
same targets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S, LIMIT_MIB = 120, 3 * 1024
CUDAGRAPH_LIMIT_S = 150  # the compile map and the CUDA-graph map together


def measure(model: str, launch: str, tokens: int, device: str, framework: str = "sglang") -> dict:
    """One map in a fresh child process of this one (so RUSAGE_CHILDREN is its own)."""
    code = (
        "import json, resource, subprocess, sys, time\n"
        "argv = json.loads(sys.argv[1])\n"
        "t = time.perf_counter()\n"
        "done = subprocess.run(argv, capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "said = [ln for ln in done.stdout.splitlines() if ln.startswith(('CRASHED', 'error'))]\n"
        "print(json.dumps({'exit': done.returncode, 'wall_s': round(wall, 1), 'peak_mib': round(peak),\n"
        "                  'stderr': done.stderr[-400:], 'stdout': done.stdout[-4000:], 'said': said[-1:]}))\n"
    )
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, "-m", "graphbreak_doctor", "trace", "--mode", "map", "--device", device,
                "--json", os.path.join(folder, "map.json"), "--no-html", "--no-cache"]
        if framework == "vllm":
            argv += ["--vllm-args", f"{model} {launch}".strip()]
        else:
            argv += ["--model", "--model-path", model, "--tokens", str(tokens)]
            argv += ["--sglang-args", launch] if launch else []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        out = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True,
                             cwd=ROOT, env=env, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        path = Path(folder) / "map.json"
        if path.exists():
            data = json.loads(path.read_text())
            regions = data.get("regions", [])
            result["entered"] = sum(1 for r in regions if r.get("calls"))
            result["registered"] = len(regions)
            graphs = data.get("cudagraphs") or {}
            result["cudagraph"] = "; ".join(
                f"{p['phase']} {p['backend']} {sum(1 for c in p['captures'] if not c['error'])}/{len(p['captures'])}"
                f" ({sum(len(c['hazards']) for c in p['captures'])} hazards)" for p in graphs.get("phases", []))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch", action="append", default=None,
                        help="launch arguments (--sglang-args); repeat for several; default: the default launch")
    parser.add_argument("--tokens", type=int, default=128, help="--tokens (default 128, the doctor's default)")
    parser.add_argument("--model-path", action="append", default=None,
                        help="a packaged model or a config folder; repeat for several; default: every packaged model")
    parser.add_argument("--device", action="append", default=None,
                        help="the emulated GPU (default sm120); repeat for several; all: every emulated preset")
    parser.add_argument("--framework", choices=("sglang", "vllm"), default="sglang",
                        help="whose launch: --sglang-args (default) or --vllm-args")
    args = parser.parse_args()
    launches = args.launch if args.launch is not None else [""]
    from graphbreak_doctor.emulation.presets import emulated_presets

    devices = args.device or ["sm120"]
    if "all" in devices:
        devices = [p.name for p in emulated_presets()]
    if args.model_path is None:
        from graphbreak_doctor.targets.models.packaged import packaged

        args.model_path = [m.name for m in packaged()]
    how = "--vllm-args" if args.framework == "vllm" else f"--model --tokens {args.tokens}"
    print(f"compile map (trace {how} --mode map), {os.cpu_count()} CPUs")
    print(f"{'model':<16} {'device':<7} {'launch':<28} {'exit':>4} {'wall s':>7} {'peak MiB':>9} {'entered':>8} "
          f"{'registered':>10}  target; CUDA-graph map (captures finished / run)")
    failed = False
    for model, device, launch in ((m, d, la) for m in args.model_path for d in devices for la in launches):
        r = measure(model, launch, args.tokens, device, args.framework)
        limit = CUDAGRAPH_LIMIT_S if r.get("cudagraph") else LIMIT_S
        ok = r["wall_s"] <= limit and r["peak_mib"] <= LIMIT_MIB
        failed |= not ok and not launch
        # A map that stopped is no measurement of the map: never "met".
        verdict = (f"{'met' if ok else 'MISSED'} (<= {limit} s, <= {LIMIT_MIB} MiB)" if r["exit"] == 0
                   else "not measured: the map stopped")
        print(f"{model:<16} {device:<7} {launch or '(default)':<28} {r['exit']:>4} {r['wall_s']:>7} {r['peak_mib']:>9} "
              f"{r.get('entered', '-'):>8} {r.get('registered', '-'):>10}  "
              f"{verdict}; {r.get('cudagraph') or '-'}")
        if r["exit"] != 0:
            said = r.get("said") or [line for line in r["stdout"].splitlines() if line.startswith(("CRASHED", "error"))]
            print(f"    {(said or [r['stderr'].strip() or '(nothing said)'])[-1][:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
