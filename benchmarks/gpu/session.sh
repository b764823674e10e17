#!/usr/bin/env bash
# The whole GPU check of the Triton kernels as one scripted call on a GPU machine (at most about 9.5 minutes with the
# default limits, so that it fits a 10-minute call; every result lands in $OUT even if the call is cut short):
#   OUT=/path/to/results bash benchmarks/gpu/session.sh
# Run `bash benchmarks/gpu/wheels.sh` first where pip reaches the package index and copy the repo's .whl/ along:
# they hold the titans-pytorch and flash-linear-attention references. Steps, each under its own time limit:
#   1. environment (nvidia-smi, torch / triton versions)
#   2. GPU tests of atlas-kernels (bf16 at real shapes, fp32 odd shapes, dispatch): pytest -m gpu   (PYTEST_S)
#   3. benchmarks/kernels_gpu.py --quick (linear + MLP checks and timing at 340M, T = 2048)        (BENCH_S)
#   4. benchmarks/kernels_gpu.py --only mlp (the MLP / gated-MLP memory at 340M and 760M)         (BENCH_S)
#   5. benchmarks/kernels_gpu.py --only atlas (Atlas's Muon paths beside the GD twin, 760M then 340M) (ATLAS_S)
# Results: $OUT/env.txt, $OUT/pytest_gpu.log, $OUT/kernels_gpu_quick.md, $OUT/kernels_gpu_mlp.md,
# $OUT/kernels_gpu_atlas.md, $OUT/session.log. STEPS picks steps (default "1 2 3 4 5"; the environment step always
# runs): STEPS=5 runs the Atlas rows alone, for example when the kernels were checked in an earlier call.
# When a check faults (illegal address), `python benchmarks/gpu/triage.py` runs every kernel alone, forward then
# backward, each in its own process, and names the stage that faulted.
set -uo pipefail
OUT=${OUT:-/tmp/atlas-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1
# Per-step limits (seconds); shrink them when the device time left is short.
PYTEST_S=${PYTEST_S:-180}
BENCH_S=${BENCH_S:-110}
ATLAS_S=${ATLAS_S:-150}
STEPS=" ${STEPS:-1 2 3 4 5} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/packages/atlas-kernels/src${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  python3 -c "import titans_pytorch, fla; print('titans-pytorch ok, fla', fla.__version__)" || echo "references missing"
} | tee "$OUT/env.txt"
if step 2; then
  echo "== step 2: GPU tests"
  timeout "$PYTEST_S" python3 -m pytest packages/atlas-kernels/tests/test_triton_gpu.py \
    packages/atlas-kernels/tests/test_subop_dispatch.py -m gpu -q -p no:cacheprovider --durations=10 2>&1 \
    | tee "$OUT/pytest_gpu.log"
fi
if step 3; then
  echo "== step 3: kernels_gpu.py --quick"
  timeout "$BENCH_S" python3 benchmarks/kernels_gpu.py --quick --budget $((BENCH_S - 20)) --out "$OUT/kernels_gpu_quick.md"
fi
if step 4; then
  echo "== step 4: kernels_gpu.py --only mlp"
  timeout "$BENCH_S" python3 benchmarks/kernels_gpu.py --only mlp --budget $((BENCH_S - 20)) --out "$OUT/kernels_gpu_mlp.md"
fi
if step 5; then
  echo "== step 5: kernels_gpu.py --only atlas"
  timeout "$ATLAS_S" python3 benchmarks/kernels_gpu.py --only atlas --budget $((ATLAS_S - 20)) \
    --out "$OUT/kernels_gpu_atlas.md"
fi
date -u
