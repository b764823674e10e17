#!/usr/bin/env bash
# Run where pip reaches the package index, before a GPU run (the GPU machine may have no network): downloads the
# pure-Python wheels the GPU benchmark's references need and the GPU image lacks (titans-pytorch with its dependencies, flash-linear-attention) into
# .whl/ at the repo root, ignored by git; copy it along to the GPU machine. About 3 MB.
# The GPU image we ran on already has torch, triton, einops, transformers, numpy, sympy.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
grep -qxF "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
PY=${PYTHON:-.venv/bin/python}
wheels=(
  titans-pytorch==0.5.5 assoc-scan==0.0.6 accelerated-scan==0.3.1 axial-positional-embedding==0.3.12
  einx==0.4.3 frozendict==2.5.1 hyper-connections==0.4.11 torch-einops-utils==0.2.0 rotary-embedding-torch==0.9.1
  tensordict==0.15.3 pyvers==0.2.3 x-transformers==2.31.10 loguru==0.7.3
  flash-linear-attention==0.6.0 fla-core==0.6.0
)
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -q -d .whl "${wheels[@]}"
ls .whl
