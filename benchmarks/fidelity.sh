#!/usr/bin/env bash
# How well the emulated GPU predicts the real one, on a machine with one NVIDIA GPU.
#
#   bash benchmarks/fidelity.sh [OUT_DIR]
#
# Interpreters (each optional but PYTHON; a target whose environment is not
# given is reported as not compared):
#   PYTHON          the doctor's main environment (flashinfer 0.7.4)   default: python
#   PYTHON_FI063    flashinfer 0.6.3 (the user's story)                 e.g. .venv-fi063/bin/python
#   PYTHON_SGLANG   SGLang (its own GLM-5 dense layer)                  e.g. .venv-sglang/bin/python
#   PYTHON_VLLM     vLLM (one model forward, its compile map)           e.g. .venv-vllm/bin/python
#
# Each target is traced twice: on the real GPU (--device cuda) and on the
# emulated preset of the same GPU (sm90 for H100, h200 for H200, sm100 for
# B200, sm120 for RTX PRO 6000; from the device's capability and name). Then
# `graphbreak-doctor diff` compares each pair, and one table says, per target,
# how many break keys (category, package, function, gb_type: where and why
# it broke) each run reported and both did, and the first failure of each
# (fullgraph's verdict). The targets: FlashInfer entry points SGLang and
# vLLM call (norm, activation, FP4 quantization, FP4 GEMM, paged prefill and
# decode), the user's story on flashinfer 0.6.3, the device-query probes
# (fixtures/device_queries.py), GLM-5's dense layer (the reference and
# SGLang's own), and vLLM's Qwen3-MoE forward. A target that cannot run on
# this GPU (NVFP4 needs Blackwell) is reported as such and left out of the
# rate. Last, benchmarks/device_values.py puts its host-read probes to both.
# It takes about 5 minutes on one GPU; findings, diffs and logs stay in
# OUT_DIR (default reports/fidelity; a relative OUT_DIR is taken from the
# repository root).
set -uo pipefail

PY=${PYTHON:-python}
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-reports/fidelity}
mkdir -p "$OUT"

preset=$("$PY" - <<'EOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("fidelity.sh: no CUDA GPU here; run it on a machine with one")
major, minor = torch.cuda.get_device_capability(0)
name = torch.cuda.get_device_name(0)
presets = {(9, 0): "h200" if "H200" in name else "sm90", (10, 0): "sm100", (10, 3): "sm100",
           (12, 0): "sm120", (12, 1): "sm120"}
if (major, minor) not in presets:
    sys.exit(f"fidelity.sh: no emulated preset for compute capability {major}.{minor} ({name})")
print(presets[major, minor])
EOF
) || exit 2
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))')
echo "GPU: $gpu vs emulated $preset"

SWEEP=fixtures.flashinfer_sweep
QUERIES=fixtures.device_queries
# name|interpreter variable|trace arguments
TARGETS=(
  "rmsnorm|PYTHON|--target $SWEEP:rmsnorm"
  "silu_and_mul|PYTHON|--target $SWEEP:silu_and_mul"
  "fp4|PYTHON|--target fixtures.flashinfer_targets:fp4_quantize_wrapper"
  "mm_fp4|PYTHON|--target $SWEEP:mm_fp4"
  "prefill|PYTHON|--target $SWEEP:prefill_paged"
  "decode|PYTHON|--target $SWEEP:decode_paged"
  "fp4-063|PYTHON_FI063|--target fixtures.flashinfer_targets:fp4_quantize_wrapper"
  "q-capability|PYTHON|--target $QUERIES:by_capability"
  "q-count|PYTHON|--target $QUERIES:by_count"
  "q-name|PYTHON|--target $QUERIES:by_name"
  "q-memory|PYTHON|--target $QUERIES:by_free_memory"
  "dense|PYTHON|--layer dense"
  "sgl-dense|PYTHON_SGLANG|--layer dense --impl sglang"
  "vllm|PYTHON_VLLM|--vllm-args qwen3-30b-a3b"
)
names=()
for entry in "${TARGETS[@]}"; do
  IFS='|' read -r name var args <<< "$entry"
  names+=("$name")
  py=${!var:-}
  [ "$var" = PYTHON ] && py=$PY
  if [ -z "$py" ]; then
    echo "$name: not compared: no environment ($var unset)" > "$OUT/$name-skipped.txt"
    continue
  fi
  for device in cuda "$preset"; do
    # shellcheck disable=SC2086
    timeout 300 "$py" -m graphbreak_doctor trace $args --device "$device" --mode both --no-cache \
      --json "$OUT/$name-$device.json" --no-html > "$OUT/$name-$device.txt" 2> "$OUT/$name-$device.err"
    rc=$?
    # 0: traced; 3: crashed under Dynamo (still findings). Anything else: no findings.
    if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
      echo "$name on $device: not traced (exit $rc): $(tail -n 1 "$OUT/$name-$device.err")" | tee -a "$OUT/$name-skipped.txt"
      rm -f "$OUT/$name-$device.json"
    fi
  done
  if [ -f "$OUT/$name-$preset.json" ] && [ -f "$OUT/$name-cuda.json" ]; then
    "$py" -m graphbreak_doctor diff "$OUT/$name-$preset.json" "$OUT/$name-cuda.json" \
      --json "$OUT/$name-diff.json" > "$OUT/$name-diff.txt"
  fi
done

"$PY" - "$OUT" "$preset" "$gpu" "${names[@]}" <<'EOF'
import json, sys
from pathlib import Path
out, preset, gpu, names = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
both = total = agreed = compared = 0
print(f"{'target':13} {'emulated':>9} {'real':>6} {'both':>6} {'rate':>6}  first failure (emulated -> real)")
for name in names:
    path = out / f"{name}-diff.json"
    if not path.exists():
        skipped = out / f"{name}-skipped.txt"
        why = skipped.read_text().strip().splitlines()[-1] if skipped.exists() else "no findings"
        print(f"{name:13} not compared: {why[:120]}")
        continue
    d = json.loads(path.read_text())
    n_both, n_a, n_b = len(d["both"]), len(d["only_a"]), len(d["only_b"])
    both, total = both + n_both, total + n_both + n_a + n_b
    same = d["a"]["verdict"] == d["b"]["verdict"]
    agreed, compared = agreed + same, compared + 1
    rate = f"{d['match_rate']:6.0%}" if n_both + n_a + n_b else "  same"
    print(f"{name:13} {n_a + n_both:9} {n_b + n_both:6} {n_both:6} {rate}  "
          f"{d['a']['verdict']} -> {d['b']['verdict']}{'' if same else '  (differs)'}")
if total:
    print(f"break keys, all targets: {both}/{total} = {both / total:.0%}; first failures agree on "
          f"{agreed} of {compared} targets ({gpu} vs emulated {preset})")
elif compared:
    print(f"no break on either side; first failures agree on {agreed} of {compared} targets")
EOF

echo
echo "host reads of device values (benchmarks/device_values.py):"
"$PY" benchmarks/device_values.py --json "$OUT/device-values-real.json" > "$OUT/device-values-real.md" \
  && "$PY" benchmarks/device_values.py --compare "$OUT/device-values-real.json" --preset "$preset"
