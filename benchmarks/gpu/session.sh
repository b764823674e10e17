#!/usr/bin/env bash
# Everything a GPU machine is needed for, as one scripted call of at most 9 minutes (the step limits below sum to
# 540 s, inside a 10-minute call):
#   OUT=/path/to/out bash benchmarks/gpu/session.sh
# Before it, where pip reaches the package index: `bash benchmarks/gpu/wheels.sh` (.whl/: flash-linear-attention and
# titans-pytorch) and the prepared embedded corpus at DATA (default results/embedded/data/embedded: `atlas data
# prepare --config config/data/embedded.yaml --out results/embedded/data/embedded`, 4.4 MB); carry both along.
# Afterwards, on any CPU: `python benchmarks/gpu/collect.py <the returned OUT>` writes summary.md (every step's
# tables in kernels_gpu.md's format) and the study's verdicts.
#
# Steps, in order, each under its own limit (seconds; LIMIT_<step>=N overrides one), the open faults first:
#   env            40  wheels from .whl/, nvidia-smi, versions, a GPU matmul and one Triton kernel     env.txt
#   mlp_sweep      45  the MLP kernel's forward at head dim 32/48/64 x hidden block 16/32/64 x 4/8 warps
#                      vs torch float64, beside torch in bf16 and fp32, each case in its own process  mlp_sweep.md
#   racecheck      20  compute-sanitizer --tool racecheck on that forward at D = 64 (or why not)  racecheck.txt
#   newton_schulz  20  Newton-Schulz fp32 and bf16 kernels vs float64, beside torch in the same dtype
#                                                                                              newton_schulz.md
#   pytest_gpu     90  the rest of `pytest -m gpu` (the bf16 real-shape tests are the sweep's)  pytest_gpu.log
#   timing         45  linear-memory rows at 340M / 760M: Triton, torch chunk op, fla Gated DeltaNet  timing.md
#   compiled       30  the torch chunk op under torch.compile, if atlas-kernels offers it         compiled.md
#   atlas          50  kernels_gpu.py --only atlas --quick: Atlas at 760M beside its GD twin        atlas.md
#   panel         200  the study panel (study_panel.sh: no pilot, no tracking, processes side by side;
#                      PLAN = benchmarks/gpu/panel_plan.json if present: its jobs and grouping)    panel/
# With the timing or the compiled step selected, their rows' first calls run in the background from the end of env
# (timing_rows.py --warm, the eager rows' Triton kernels and the compiled rows' graphs side by side, niced, 4
# inductor compile threads; log compile_warm.log) while the correctness steps run, for at most the sum of their
# limits; it is stopped before the first timed step (timing, compiled, atlas or panel), so that nothing shares the
# GPU with a timing row. The timed steps read the same caches (TRITON_CACHE_DIR, default $RES/triton-cache, and
# TORCHINDUCTOR_CACHE_DIR, default $RES/inductor-cache, both left out of the archive) and load what it compiled.
# A step that fails or runs out of time does not stop the next. Each step's output lands in RES (default
# /tmp/atlas-gpu-call) when the step ends (tables: temp file, then rename, after every row or case); after every
# step RES is packed into $OUT/gpu-call.tar.gz (again temp file, then rename; training checkpoints left out), so
# OUT only ever holds that archive, steps.tsv (step, limit, wall time, exit code) and session.log: a call cut short
# returns everything up to its last finished step.
# STEPS="mlp_sweep racecheck" runs only those steps (env always runs). PRINT_BUDGET=1 prints the limits and their
# sum and exits. SMOKE=1 runs every step's tiny CPU version (Triton interpreter; what tests/test_gpu_rehearsal.py
# runs, with stub nvidia-smi and compute-sanitizer).
set -uo pipefail
STEP_NAMES=(env mlp_sweep racecheck newton_schulz pytest_gpu timing compiled atlas panel)
# 2026-12-04: a cold machine's env step outlasted 30 s, pytest_gpu 55 s, and the panel needs ~150 s of training
declare -A LIMIT=([env]=40 [mlp_sweep]=45 [racecheck]=20 [newton_schulz]=20 [pytest_gpu]=90 [timing]=45
  [compiled]=30 [atlas]=50 [panel]=200)
declare -A OUTPUT=([env]=env.txt [mlp_sweep]=mlp_sweep.md [racecheck]=racecheck.txt
  [newton_schulz]=newton_schulz.md [pytest_gpu]=pytest_gpu.log [timing]=timing.md [compiled]=compiled.md
  [atlas]=atlas.md [panel]=panel/panel.log)
total=0
for name in "${STEP_NAMES[@]}"; do
  override="LIMIT_$name"
  LIMIT[$name]=${!override:-${LIMIT[$name]}}
  total=$((total + LIMIT[$name]))
done
if [ "${PRINT_BUDGET:-0}" = 1 ]; then
  for name in "${STEP_NAMES[@]}"; do printf '%s\t%s\t%s\n' "$name" "${LIMIT[$name]}" "${OUTPUT[$name]}"; done
  printf 'total\t%s\n' "$total"
  exit 0
fi

OUT=${OUT:-/tmp/atlas-gpu-out}
RES=${RES:-/tmp/atlas-gpu-call}
PY=${PYTHON:-python3}
SMOKE_FLAG=""
[ "${SMOKE:-0}" = 1 ] && SMOKE_FLAG="--smoke"
SELECTED=" ${STEPS:-${STEP_NAMES[*]}} env "
mkdir -p "$OUT" "$RES"
rm -f "$RES/steps.tsv"  # this call's steps only; the panel's finished seeds in RES stay (a rerun resumes them)
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1 MLFLOW_DISABLE_TELEMETRY=true
if ls .whl/*.whl >/dev/null 2>&1; then
  PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"  # filled by the env step
fi
export PYTHONPATH="$PWD/packages/atlas-kernels/src${PYTHONPATH:+:$PYTHONPATH}"
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$RES/inductor-cache}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$RES/triton-cache}
export RES PY SMOKE_FLAG
echo "GPU call: $(date -u +%FT%TZ), limits sum to $total s, results in $RES, returned from $OUT"

step_env() {
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || echo "wheels: install failed"
  fi
  "$PY" benchmarks/gpu/faults.py env $SMOKE_FLAG --out "$RES/env.txt"
}
step_mlp_sweep() {
  "$PY" benchmarks/gpu/faults.py mlp $SMOKE_FLAG --jobs 9 --timeout $((STEP_LIMIT - 10)) --out "$RES/mlp_sweep.md"
}
step_racecheck() {
  local san race rc filter=()
  race=$("$PY" benchmarks/gpu/faults.py list $SMOKE_FLAG | grep "^race-")
  san=$(command -v compute-sanitizer || true)
  if [ -z "$san" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then san=/usr/local/cuda/bin/compute-sanitizer; fi
  if [ -z "$san" ]; then
    echo "skipped: compute-sanitizer is not on PATH nor in /usr/local/cuda/bin" > "$RES/racecheck.txt"
    return 0
  fi
  # only the MLP forward is instrumented: torch's own kernels would multiply the sanitizer's cost
  "$san" --help 2>/dev/null | grep -q -- '--kernel-name' && filter=(--kernel-name kns=_mlp_fwd_kernel)
  "$san" --tool racecheck --error-exitcode 3 ${filter[@]+"${filter[@]}"} \
    "$PY" benchmarks/gpu/faults.py case "$race" $SMOKE_FLAG > "$RES/racecheck.txt.tmp" 2>&1
  rc=$?
  mv -f "$RES/racecheck.txt.tmp" "$RES/racecheck.txt"
  cat "$RES/racecheck.txt"
  return $rc
}
step_newton_schulz() {
  "$PY" benchmarks/gpu/faults.py ns $SMOKE_FLAG --jobs 6 --timeout $((STEP_LIMIT - 10)) --out "$RES/newton_schulz.md"
}
step_pytest_gpu() {
  local parallel=() tests=packages/atlas-kernels/tests
  # each test compiles its own kernels: xdist spreads the compiles over the cores
  if [ -z "$SMOKE_FLAG" ] && "$PY" -c "import xdist" 2>/dev/null; then parallel=(-n 8); fi
  # on a CPU every gpu test skips: one file shows the plumbing at a third of the collection time
  [ -z "$SMOKE_FLAG" ] || tests=$tests/test_triton_gpu.py
  "$PY" -m pytest "$tests" -m gpu -k "not bf16_real_shapes" -v --tb=short -p no:cacheprovider \
    --junitxml="$RES/pytest_gpu.xml" ${parallel[@]+"${parallel[@]}"}
}
step_timing() {
  "$PY" benchmarks/gpu/timing_rows.py --rows eager --budget $((STEP_LIMIT - 10)) $SMOKE_FLAG --out "$RES/timing.md"
}
step_compiled() {
  "$PY" benchmarks/gpu/timing_rows.py --rows compiled --budget $((STEP_LIMIT - 10)) $SMOKE_FLAG \
    --out "$RES/compiled.md"
}
step_atlas() {
  "$PY" benchmarks/gpu/atlas_rows.py ${SMOKE_FLAG:---quick} --budget $((STEP_LIMIT - 10)) --out "$RES/atlas.md"
}
step_panel() {
  local plan=${PLAN-benchmarks/gpu/panel_plan.json}
  [ -z "$plan" ] || [ -f "$plan" ] || plan=""
  OUT="$RES/panel" REPORT=0 PLAN="$plan" PYTHON="$PY" bash benchmarks/gpu/study_panel.sh
}
export -f step_env step_mlp_sweep step_racecheck step_newton_schulz step_pytest_gpu step_timing step_compiled \
  step_atlas step_panel

record() {  # step, limit, wall, rc: one line of steps.tsv, rewritten whole (temp file, then rename)
  local tsv="$RES/steps.tsv"
  [ -f "$tsv" ] || printf 'step\tlimit_s\twall_s\trc\toutput\n' > "$tsv"
  { cat "$tsv"; printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${OUTPUT[$1]}"; } > "$tsv.tmp"
  mv -f "$tsv.tmp" "$tsv"
  cp "$tsv" "$OUT/steps.tsv.tmp" && mv -f "$OUT/steps.tsv.tmp" "$OUT/steps.tsv"
}
pack() {  # RES as one archive in OUT; tar's exit 1 (a file changed while read) still leaves a whole archive
  tar -czf "$OUT/gpu-call.tar.gz.tmp" -C "$RES" --exclude=checkpoints --exclude=loss_curve.png \
    --exclude=inductor-cache --exclude=triton-cache --exclude='*.tmp' . 2>/dev/null
  [ $? -le 1 ] && mv -f "$OUT/gpu-call.tar.gz.tmp" "$OUT/gpu-call.tar.gz"
}
run_step() {
  local name=$1 limit=${LIMIT[$1]} start rc wall
  if [[ "$SELECTED" != *" $name "* ]]; then
    return
  fi
  echo "== step $name (limit $limit s)"
  rm -f "$RES/${OUTPUT[$name]}"  # an earlier call's file must not pass for this one's
  start=$(date +%s.%N)
  # TERM 5 s before the limit, KILL at it; timeout signals the step's whole process group (its subprocesses too)
  STEP_LIMIT=$limit timeout -k 5 $((limit - 5)) bash -c "step_$name" 2>&1 | tee "$RES/$name.log"
  rc=${PIPESTATUS[0]}
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ ! -e "$RES/${OUTPUT[$name]}" ]; then  # a step cut short still leaves its file, saying so
    mkdir -p "$(dirname "$RES/${OUTPUT[$name]}")"
    { echo "no output: step $name ended with exit code $rc after $wall s (124: its limit); its log's end:"
      tail -n 20 "$RES/$name.log"; } > "$RES/${OUTPUT[$name]}"
  fi
  echo "== step $name: exit $rc, $wall s"
  record "$name" "$limit" "$wall" "$rc"
  pack
}

WARM_PID=""
warm_rows() {  # ROWS side by side (eager: Triton compiles, one core each; compiled: inductor, 4 threads)
  local rows out pids=()
  for rows in $ROWS; do
    out=compile_warm.md
    [ "$rows" = compiled ] || out=compile_warm_$rows.md
    "$PY" benchmarks/gpu/timing_rows.py --rows "$rows" --warm --budget "$BUDGET" $SMOKE_FLAG --out "$RES/$out" &
    pids+=($!)
  done
  wait "${pids[@]}"
}
export -f warm_rows
start_warm() {  # the timed rows' first calls, in the background, for the correctness steps' time
  local budget=0 name rows=""
  [[ "$SELECTED" == *" timing "* ]] && rows="eager"
  [[ "$SELECTED" == *" compiled "* ]] && rows="${rows:+$rows }compiled"
  [ -n "$rows" ] || return 0
  for name in mlp_sweep racecheck newton_schulz pytest_gpu; do
    [[ "$SELECTED" == *" $name "* ]] && budget=$((budget + LIMIT[$name]))
  done
  [ "$budget" -gt 10 ] || return 0
  echo "== compile warm-up ($rows): started in the background for at most $budget s (compile_warm.log)"
  # timeout runs it in a process group of its own and passes a TERM on to the whole group (compile workers too)
  ROWS="$rows" BUDGET="$budget" TORCHINDUCTOR_COMPILE_THREADS=4 timeout -k 5 "$budget" nice -n 10 bash -c warm_rows \
    > "$RES/compile_warm.log" 2>&1 &
  WARM_PID=$!
}
stop_warm() {  # before a timed step: nothing may share the GPU with a timing row
  [ -n "$WARM_PID" ] || return 0
  if kill -0 "$WARM_PID" 2>/dev/null && [ -n "$SMOKE_FLAG" ]; then
    # the smoke steps last seconds, less than the warm-up's own imports on a busy machine; nothing here is timed
    # for real, so the rehearsal lets it finish (within its budget) rather than stop it before its first row
    echo "== compile warm-up: waited for it before step $1 (smoke run)"
  elif kill -0 "$WARM_PID" 2>/dev/null; then
    kill -TERM "$WARM_PID" 2>/dev/null
    echo "== compile warm-up: stopped before step $1 (what it compiled stays in the cache)"
  else
    echo "== compile warm-up: ended before step $1"
  fi
  wait "$WARM_PID" 2>/dev/null
  WARM_PID=""
}

for name in "${STEP_NAMES[@]}"; do
  case $name in timing|compiled|atlas|panel) [[ "$SELECTED" == *" $name "* ]] && stop_warm "$name" ;; esac
  run_step "$name"
  [ "$name" = env ] && start_warm
done
stop_warm end
echo "GPU call done: $(date -u +%FT%TZ)"
