#!/usr/bin/env bash
# Why Atlas stalls on MQAR: the memory's first writes (atlas-experiments docs/eval-synthetic.md, "first writes").
# Five model variants (one change each against the Atlas preset) x three seeds on the short MQAR setting, every run
# the same command; results/mqar-first-writes/<variant>-s<seed>.json, then a table of per-seed accuracies.
#   bash scripts/studies/mqar_first_writes.sh [JOBS]      (JOBS parallel runs, default 2; ~3.5 CPU-min per run)
# Decision rule, fixed before the runs were read: per seed s, d_s = acc(variant) - acc(base). A variant becomes the
# default only if every d_s > 0, mean(d) >= 0.05 and a one-sided paired t-test gives p < 0.05; it is "worse" if
# every d_s < 0 and mean(d) <= -0.05; anything else is inconclusive and leaves the default as it is.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT_DIR:-$root/results/mqar-first-writes}
jobs=${1:-2}
atlas=${ATLAS:-$root/.venv/bin/atlas}
mkdir -p "$out/configs"
# value scale sqrt(8): the norm of the LayerNorm branch's output per 8-dim memory head at init
declare -A variants=(
  [base]=""
  [no_residual]="memory: {residual: false}"
  [value_scale]="memory_value_scale: 2.828"
  [ln_gain_0.1]="memory_ln_gain_init: 0.1"
  [output_zero]="memory_output_init: zero"
)
runs=()
for name in "${!variants[@]}"; do
  cfg="$out/configs/$name.yaml"
  if [ -n "${variants[$name]}" ]; then
    printf 'preset: atlas\noverrides: {%s}\n' "${variants[$name]}" > "$cfg"
  else
    printf 'preset: atlas\n' > "$cfg"
  fi
  for seed in 0 1 2; do runs+=("$name $seed"); done
done
printf '%s\n' "${runs[@]}" | xargs -P "$jobs" -L 1 bash -c '
  name=$0; seed=$1; res='"$out"'/$name-s$seed.json
  [ -f "$res" ] && exit 0
  '"$atlas"' eval mqar --models '"$out"'/configs/$name.yaml --settings 16x2 --vocab-size 32 --width 32 \
    --steps 300 --threads 1 --seed $seed --no-track --no-progress --out "$res.tmp.json" > '"$out"'/$name-s$seed.log 2>&1 \
    && mv "$res.tmp.json" "$res" && echo "done $name seed $seed"'
"${PYTHON:-$root/.venv/bin/python}" - "$out" <<'PY'
import json, math, pathlib, statistics, sys

from scipy import stats

out = pathlib.Path(sys.argv[1])
acc = {}
for f in sorted(out.glob("*-s[0-9].json")):
    name, seed = f.stem.rsplit("-s", 1)
    metrics = json.loads(f.read_text())["metrics"]
    acc.setdefault(name, {})[int(seed)] = next(v for k, v in metrics.items() if k.startswith("acc/") and k.count("/") == 2)
seeds = (0, 1, 2)
print("| variant | seed 0 | seed 1 | seed 2 | mean | sd | d_s vs base | mean d | p (one-sided) | verdict |")
print("|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
for name in sorted(acc, key=lambda n: (n != "base", n)):
    vals = [acc[name].get(s) for s in seeds]
    cells = " | ".join(f"{v:.3f}" if v is not None else "-" for v in vals)
    got = [v for v in vals if v is not None]
    mean, sd = statistics.mean(got), (statistics.stdev(got) if len(got) > 1 else math.nan)
    if name == "base" or len(got) < 3 or len(acc.get("base", {})) < 3:
        print(f"| {name} | {cells} | {mean:.3f} | {sd:.3f} | | | | |")
        continue
    d = [acc[name][s] - acc["base"][s] for s in seeds]
    md = statistics.mean(d)
    p = stats.ttest_1samp(d, 0.0, alternative="greater").pvalue if statistics.stdev(d) > 0 else math.nan
    if all(x > 0 for x in d) and md >= 0.05 and p < 0.05:
        verdict = "better: adopt"
    elif all(x < 0 for x in d) and md <= -0.05:
        verdict = "worse"
    else:
        verdict = "inconclusive"
    ds = " / ".join(f"{x:+.3f}" for x in d)
    print(f"| {name} | {cells} | {mean:.3f} | {sd:.3f} | {ds} | {md:+.3f} | {p:.3f} | {verdict} |")
PY
