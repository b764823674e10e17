#!/usr/bin/env bash
# The claims study's GPU panel in one scripted call on one GPU machine (config/study/claims.yaml, protocols of
# scale `gpu`: language-model validation loss of small models on the embedded corpus, 3 seeds per arm):
#   DATA=results/embedded/data/embedded OUT=/path/to/out bash benchmarks/gpu/study_panel.sh
# DATA is the embedded corpus prepared beforehand (`make run` or `atlas data prepare --config
# config/data/embedded.yaml --out DATA`, a few MB): the GPU machine then needs only torch, transformers, numpy and
# pyyaml, no corpus download. The pilot times every arm and, over BUDGET_MIN minutes, drops whole claims by their
# registered priority (highest number first); the jobs run one at a time on the GPU; the verdicts follow the
# registered rule. Results: $OUT/study/<protocol>/<arm>/seed<N>.json, $OUT/study/plan*.json, $OUT/verdicts.md,
# $OUT/panel.log. PANEL_DRY_RUN=1 prints the plan and the commands without training (the tests run that on CPU).
set -uo pipefail
OUT=${OUT:-/tmp/atlas-study-panel}
DATA=${DATA:-results/embedded/data/embedded}
BUDGET_MIN=${BUDGET_MIN:-8}
CLAIMS=${CLAIMS:-config/study/claims.yaml}
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
if [ ! -f "$DATA/manifest.json" ]; then
  echo "no prepared corpus at $DATA (prepare it first: see the header)"; exit 2
fi
jobs=$(atlas study plan "${common[@]}") || exit 1
echo "$(echo "$jobs" | wc -l) jobs planned"
if [ "${PANEL_DRY_RUN:-0}" = 1 ]; then
  echo "$jobs"
  echo "atlas study pilot ${common[*]} --budget-minutes $BUDGET_MIN --cores 1 --data $DATA --drop-by-priority --out $OUT/study/plan.json"
  echo "atlas study run ${common[*]} --job <job> --plan $OUT/study/plan.json --data $DATA --tracking-uri sqlite:///$OUT/mlflow.db"
  echo "atlas study report ${common[*]} --out $OUT"
  exit 0
fi
atlas study pilot "${common[@]}" --budget-minutes "$BUDGET_MIN" --cores 1 --data "$DATA" --drop-by-priority \
  --out "$OUT/study/plan.json" || exit 1
for job in $jobs; do
  atlas study run "${common[@]}" --job "$job" --plan "$OUT/study/plan.json" --data "$DATA" \
    --tracking-uri "sqlite:///$OUT/mlflow.db" || echo "job $job failed"
done
atlas study report "${common[@]}" --out "$OUT"
date -u
