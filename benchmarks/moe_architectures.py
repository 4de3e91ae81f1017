"""Every MoE architecture that both the installed transformers and SGLang's
model registry know, each traced from a config written from transformers'
defaults: the compile map of its model forward as SGLang builds it, or the
one line the doctor refused it with. Prints the Markdown table
docs/models.md holds ("Which MoE architectures the doctor traces").

    .venv-sglang/bin/python benchmarks/moe_architectures.py             # all, one at a time
    .venv-sglang/bin/python benchmarks/moe_architectures.py --jobs 2 --only Mixtral,Olmoe
    .venv-sglang/bin/python benchmarks/moe_architectures.py --list       # the architectures only

Each run is `graphbreak-doctor trace --model-path DIR --mode map --device
sm100` in a process of its own with a time limit.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Config keys that name a count of routed experts, as transformers' MoE configs call it.
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")


def moe_architectures() -> dict[str, str]:
    """architecture -> transformers' model type, for every causal-LM
    architecture transformers maps whose default config has routed experts
    and that SGLang's registry serves (read from both registries)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from graphbreak_doctor.targets.frameworks.sglang.served import served_architectures

    served = served_architectures()
    out: dict[str, str] = {}
    for model_type, names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        for arch in names if isinstance(names, (list, tuple)) else [names]:
            if arch not in served:
                continue
            values = default_config(model_type)
            if values is not None and any(values.get(k) for k in EXPERT_KEYS):
                out[arch] = model_type
    return dict(sorted(out.items()))


def default_config(model_type: str) -> dict | None:
    """transformers' default config of ``model_type`` as config.json holds it
    (None where transformers cannot make one here)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[model_type]().to_dict()
    except Exception as e:  # noqa: BLE001 -- a config class whose own imports fail here
        print(f"# {model_type}: transformers cannot make its default config: {type(e).__name__}", file=sys.stderr)
        return None


def trace(arch: str, model_type: str, device: str, timeout: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        config = {**default_config(model_type), "architectures": [arch]}
        Path(folder, "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        out = os.path.join(folder, "map.json")
        argv = [sys.executable, "-m", "graphbreak_doctor", "trace", "--model-path", folder, "--mode", "map",
                "--device", device, "--json", out, "--no-html", "--timeout", str(timeout)]
        start = time.perf_counter()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            return {"arch": arch, "model_type": model_type, "exit": "timeout", "wall_s": timeout + 60, "line": ""}
        result = {"arch": arch, "model_type": model_type, "exit": done.returncode,
                  "wall_s": round(time.perf_counter() - start), "line": ""}
        if os.path.exists(out):
            data = json.loads(Path(out).read_text(encoding="utf-8"))
            facts = data["target"].get("facts") or {}
            regions = data.get("regions") or []
            crash = (data.get("fullgraph") or {}).get("error") or ""
            result.update(model_class=facts.get("model_class", ""), quantization=facts.get("quantization", ""),
                          entered=sum(1 for r in regions if r.get("calls")), regions=len(regions),
                          outcome=data.get("outcome", ""), line=crash.splitlines()[0][:200] if crash else "")
        else:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            result["line"] = (lines[-1] if lines else "")[:200]
        return result


def row(r: dict) -> str:
    """traced: the map ran both phases; stopped: findings were written, with
    where the map stopped; refused: no findings, the doctor's one line."""
    if "entered" in r and not r["line"]:
        what = f"traced: {r['entered']} of {r['regions']} regions entered"
    elif "entered" in r:
        what = f"stopped: {r['line']}"
    else:
        what = f"refused (exit {r['exit']}): {r['line']}"
    return f"| `{r['arch']}` | {r['model_type']} | {what.replace('|', '/')} | {r['wall_s']} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the architectures and stop")
    parser.add_argument("--only", default="", help="comma-separated architectures (substrings) to run")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--device", default="sm100")
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()
    archs = moe_architectures()
    if args.list:
        print("\n".join(f"{a} {t}" for a, t in archs.items()))
        return 0
    only = [s for s in args.only.split(",") if s]
    chosen = {a: t for a, t in archs.items() if not only or any(s in a for s in only)}
    print(f"{len(chosen)} of {len(archs)} MoE architectures, --device {args.device}, {os.cpu_count()} CPUs\n")
    print("| architecture | model type | result | wall s |\n|---|---|---|---|")
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for r in pool.map(lambda item: trace(*item, args.device, args.timeout), chosen.items()):
            print(row(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
