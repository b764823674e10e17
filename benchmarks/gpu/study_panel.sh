#!/usr/bin/env bash
# The claims study's GPU panel in one scripted call on one GPU machine (config/study/claims.yaml, protocols of
# scale `gpu`: language-model validation loss of small models on the embedded corpus):
#   DATA=results/embedded/data/embedded OUT=/path/to/out bash benchmarks/gpu/study_panel.sh
# DATA is the embedded corpus prepared beforehand (`atlas data prepare --config config/data/embedded.yaml --out
# DATA`: 4.4 MB, about 20 s on 2 CPU cores): the GPU machine then needs only torch, transformers, numpy, pyyaml,
# tqdm and matplotlib, no corpus download. Without it the script prepares DATA from DATA_CONFIG, which needs the
# corpus' source packages there.
# Default mode: no pilot, no tracking. GROUPING=per-arm: one process per arm (`atlas study run --pending
# --per-arm`), all arms side by side over the machine's cores and its one GPU, each arm's seeds in sequence in its
# process; GROUPING=per-job: one process per seed, WORKERS at a time (default: the cores). Either way each seed's
# result is final (written atomically with its provenance) the moment it ends, so a call cut short keeps every
# finished seed and a later call with the same OUT runs only what is missing. PLAN (a plan file, e.g.
# benchmarks/gpu/panel_plan.json from benchmarks/gpu/panel_timing.py) limits the run to the jobs it accepts (the
# others record that they did not run) and, unless GROUPING is set, gives the grouping it was fitted for.
# REPORT=0 leaves the verdicts to the CPU side (`atlas study report --scale gpu --root OUT/study`, or
# benchmarks/gpu/collect.py on what came back).
# PANEL_MODE=pilot: the earlier sequence (the pilot times every arm and, over BUDGET_MIN minutes, drops whole claims
# by their registered priority; then one job at a time, tracked in OUT/mlflow.db).
# Results: $OUT/study/<protocol>/<arm>/seed<N>.json (and each seed's run folder), $OUT/study/logs/, $OUT/verdicts.md
# (REPORT=1), $OUT/panel.log.
# PANEL_DRY_RUN=1 prints the plan and the commands without training (the tests run that on CPU).
set -uo pipefail
OUT=${OUT:-/tmp/atlas-study-panel}
DATA=${DATA:-results/embedded/data/embedded}
DATA_CONFIG=${DATA_CONFIG:-config/data/embedded.yaml}
CLAIMS=${CLAIMS:-config/study/claims.yaml}
PLAN=${PLAN:-}
MODE=${PANEL_MODE:-per-arm}
WORKERS=${WORKERS:-0}
REPORT=${REPORT:-1}
BUDGET_MIN=${BUDGET_MIN:-8}
mkdir -p "$OUT"
exec > >(tee "$OUT/panel.log") 2>&1
export PYTHONUNBUFFERED=1 MLFLOW_DISABLE_TELEMETRY=true
for pkg in atlas-kernels atlas-model atlas-data atlas-experiments; do
  PYTHONPATH="$PWD/packages/$pkg/src${PYTHONPATH:+:$PYTHONPATH}"
done
export PYTHONPATH
PY=${PYTHON:-python3}
atlas() { "$PY" -m atlas_experiments.cli "$@"; }
common=(--claims "$CLAIMS" --scale gpu --root "$OUT/study")
date -u
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
if [ ! -f "$DATA/manifest.json" ] && [ "${PANEL_DRY_RUN:-0}" != 1 ]; then
  echo "no prepared corpus at $DATA: preparing it from $DATA_CONFIG"
  SECONDS=0
  atlas data prepare --config "$DATA_CONFIG" --out "$DATA" || true
  echo "prepare: ${SECONDS} s"
fi
if [ ! -f "$DATA/manifest.json" ]; then
  echo "no prepared corpus at $DATA (prepare it first and carry it along: see the header)"; exit 2
fi
plan=()
if [ -n "$PLAN" ]; then
  plan=(--plan "$PLAN")
  : "${GROUPING:=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("grouping", ""))' "$PLAN")}"
fi
GROUPING=${GROUPING:-per-arm}
if [ "${PANEL_DRY_RUN:-0}" = 1 ] || { [ "$GROUPING" = per-arm ] && [ "$WORKERS" -le 0 ]; }; then
  jobs=$(atlas study plan "${common[@]}") || exit 1  # a process start: only where the job list is needed
  arms=$(echo "$jobs" | cut -d/ -f1,2 | sort -u | wc -l)
  echo "$(echo "$jobs" | wc -l) jobs planned, $arms arms"
fi
group=()
if [ "$GROUPING" = per-arm ]; then
  group=(--per-arm)
  [ "$WORKERS" -gt 0 ] || WORKERS=$arms
else
  [ "$WORKERS" -gt 0 ] || WORKERS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc honours OMP_NUM_THREADS
fi
run=(study run "${common[@]}" --pending ${group[@]+"${group[@]}"} --workers "$WORKERS" --no-track --data "$DATA"
  ${plan[@]+"${plan[@]}"})
if [ "${PANEL_DRY_RUN:-0}" = 1 ]; then
  echo "$jobs"
  echo "$GROUPING: atlas ${run[*]}"
  echo "pilot (PANEL_MODE=pilot): atlas study pilot ${common[*]} --budget-minutes $BUDGET_MIN --cores 1 --data $DATA --drop-by-priority --out $OUT/study/plan.json"
  echo "  then per job: atlas study run ${common[*]} --job <job> --plan $OUT/study/plan.json --data $DATA --tracking-uri sqlite:///$OUT/mlflow.db"
  echo "report (REPORT=1): atlas study report ${common[*]} --out $OUT"
  exit 0
fi
status=0
if [ "$MODE" = pilot ]; then
  atlas study pilot "${common[@]}" --budget-minutes "$BUDGET_MIN" --cores 1 --data "$DATA" --drop-by-priority \
    --out "$OUT/study/plan.json" || exit 1
  for job in $(atlas study plan "${common[@]}"); do
    atlas study run "${common[@]}" --job "$job" --plan "$OUT/study/plan.json" --data "$DATA" \
      --tracking-uri "sqlite:///$OUT/mlflow.db" || { echo "job $job failed"; status=1; }
  done
else
  atlas "${run[@]}" || status=1
fi
if [ "$REPORT" = 1 ]; then
  atlas study report "${common[@]}" --out "$OUT" || status=1
fi
date -u
exit $status
