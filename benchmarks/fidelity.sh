#!/usr/bin/env bash
# How well the emulated GPU predicts the real one, on a machine with an NVIDIA GPU.
#
#   bash benchmarks/fidelity.sh [OUT_DIR]        (PYTHON=... to pick the interpreter)
#
# Traces the FP4 target (fixtures.flashinfer_targets:fp4_quantize_wrapper) and
# GLM-5's dense and MoE layers twice: on the real GPU (--device cuda) and on
# the emulated preset of the same architecture (sm90 for H100/H200, sm100 for
# B200, sm120 for RTX PRO 6000; from torch.cuda.get_device_capability), then
# `graphbreak-doctor diff`s each pair and prints the match rate: the share of
# break keys (category, package, function, gb_type) that both runs report.
# A target that cannot run on this GPU (NVFP4 needs Blackwell) is reported
# as such and left out of the rate. Findings and diffs stay in OUT_DIR
# (default reports/fidelity; a relative OUT_DIR is taken from the repository root).
set -uo pipefail

PY=${PYTHON:-python}
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-reports/fidelity}
mkdir -p "$OUT"

cap=$("$PY" -c '
import sys, torch
if not torch.cuda.is_available():
    sys.exit("fidelity.sh: no CUDA GPU here; run it on a machine with one")
print("%d%d" % torch.cuda.get_device_capability(0))') || exit 2
case "$cap" in
  90) preset=sm90 ;;
  100|103) preset=sm100 ;;
  120|121) preset=sm120 ;;
  *) echo "fidelity.sh: no emulated preset for compute capability ${cap:0:-1}.${cap: -1}" >&2; exit 2 ;;
esac
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))')
echo "GPU: $gpu (capability ${cap:0:-1}.${cap: -1}) vs emulated $preset"

declare -A ARGS=(
  [fp4]="--target fixtures.flashinfer_targets:fp4_quantize_wrapper"
  [dense]="--layer dense"
  [moe]="--layer moe"
)
for name in fp4 dense moe; do
  for device in cuda "$preset"; do
    # shellcheck disable=SC2086
    "$PY" -m graphbreak_doctor trace ${ARGS[$name]} --device "$device" --mode both \
      --json "$OUT/$name-$device.json" --no-html > "$OUT/$name-$device.txt" 2> "$OUT/$name-$device.err"
    rc=$?
    # 0: traced; 3: crashed under Dynamo (still findings). Anything else: no findings.
    if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
      echo "$name on $device: not traced (exit $rc): $(tail -n 1 "$OUT/$name-$device.err")"
      rm -f "$OUT/$name-$device.json"
    fi
  done
  if [ -f "$OUT/$name-$preset.json" ] && [ -f "$OUT/$name-cuda.json" ]; then
    "$PY" -m graphbreak_doctor diff "$OUT/$name-$preset.json" "$OUT/$name-cuda.json" \
      --json "$OUT/$name-diff.json" > "$OUT/$name-diff.txt"
  fi
done

"$PY" - "$OUT" "$preset" "$gpu" <<'EOF'
import json, sys
from pathlib import Path
out, preset, gpu = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
both = total = 0
print(f"{'target':8} {'emulated':>9} {'real':>6} {'both':>6} {'rate':>6}  verdict (emulated -> real)")
for name in ("fp4", "dense", "moe"):
    path = out / f"{name}-diff.json"
    if not path.exists():
        print(f"{name:8} not compared (see {out}/{name}-*.err)")
        continue
    d = json.loads(path.read_text())
    n_both, n_a, n_b = len(d["both"]), len(d["only_a"]), len(d["only_b"])
    both, total = both + n_both, total + n_both + n_a + n_b
    print(f"{name:8} {n_a + n_both:9} {n_b + n_both:6} {n_both:6} {d['match_rate']:6.0%}  "
          f"{d['a']['verdict']} -> {d['b']['verdict']}")
if total:
    print(f"match rate, all targets: {both}/{total} break keys = {both / total:.0%} ({gpu} vs emulated {preset})")
EOF
