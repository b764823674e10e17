#!/usr/bin/env bash
# The whole GPU check of the Triton kernels as one scripted call on a GPU machine (about 11 minutes with the default
# limits; every result lands in $OUT even if the call is cut short):
#   OUT=/path/to/results bash benchmarks/gpu/session.sh
# Run `bash benchmarks/gpu/wheels.sh` first where pip reaches the package index and copy the repo's .whl/ along:
# they hold the titans-pytorch and flash-linear-attention references. Steps, each under its own time limit:
#   1. environment (nvidia-smi, torch / triton versions)
#   2. GPU tests of atlas-kernels (bf16 at real shapes, fp32 odd shapes, dispatch): pytest -m gpu   (PYTEST_S)
#   3. benchmarks/kernels_gpu.py --quick (linear + MLP checks and timing at 340M, T = 2048)        (BENCH_S)
#   4. benchmarks/kernels_gpu.py --only mlp (the MLP / gated-MLP memory at 340M and 760M)         (BENCH_S)
#   5. benchmarks/kernels_gpu.py --only atlas --quick (Atlas's Muon paths beside the GD twin, 340M) (ATLAS_S)
# Results: $OUT/env.txt, $OUT/pytest_gpu.log, $OUT/kernels_gpu_quick.md, $OUT/kernels_gpu_mlp.md,
# $OUT/kernels_gpu_atlas.md, $OUT/session.log. ATLAS_S=0 skips step 5 when the device time left is short.
# When a check faults (illegal address), `python benchmarks/gpu/triage.py` runs every kernel alone, forward then
# backward, each in its own process, and names the stage that faulted.
set -uo pipefail
OUT=${OUT:-/tmp/atlas-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1
# Per-step limits (seconds); shrink them when the device time left is short.
PYTEST_S=${PYTEST_S:-240}
BENCH_S=${BENCH_S:-170}
ATLAS_S=${ATLAS_S:-120}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/packages/atlas-kernels/src${PYTHONPATH:+:$PYTHONPATH}"
{
  if [ "$ATLAS_S" -gt 30 ]; then
  echo "== step 5: kernels_gpu.py --only atlas --quick"
  timeout "$ATLAS_S" python3 benchmarks/kernels_gpu.py --only atlas --quick --budget $((ATLAS_S - 20)) \
    --out "$OUT/kernels_gpu_atlas.md"
fi
date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  python3 -c "import titans_pytorch, fla; print('titans-pytorch ok, fla', fla.__version__)" || echo "references missing"
} | tee "$OUT/env.txt"
echo "== step 2: GPU tests"
timeout "$PYTEST_S" python3 -m pytest packages/atlas-kernels/tests/test_triton_gpu.py packages/atlas-kernels/tests/test_subop_dispatch.py \
  -m gpu -q -p no:cacheprovider --durations=10 2>&1 | tee "$OUT/pytest_gpu.log"
echo "== step 3: kernels_gpu.py --quick"
timeout "$BENCH_S" python3 benchmarks/kernels_gpu.py --quick --budget $((BENCH_S - 20)) --out "$OUT/kernels_gpu_quick.md"
echo "== step 4: kernels_gpu.py --only mlp"
timeout "$BENCH_S" python3 benchmarks/kernels_gpu.py --only mlp --budget $((BENCH_S - 20)) --out "$OUT/kernels_gpu_mlp.md"
if [ "$ATLAS_S" -gt 30 ]; then
  echo "== step 5: kernels_gpu.py --only atlas --quick"
  timeout "$ATLAS_S" python3 benchmarks/kernels_gpu.py --only atlas --quick --budget $((ATLAS_S - 20)) \
    --out "$OUT/kernels_gpu_atlas.md"
fi
date -u
