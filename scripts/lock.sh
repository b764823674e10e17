#!/usr/bin/env bash
# Regenerate constraints.txt from the current environment (run after changing a dependency).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
{
  echo "# Pinned versions for the whole workspace (pip constraints). Regenerate with scripts/lock.sh."
  echo "# torch==2.13.0 matches the CPU build on disk here (2.13.0+cpu) and PyPI's CUDA build elsewhere."
  .venv/bin/python -m pip freeze --exclude-editable | grep -vE '^(pip|atlas-)' | sed 's/^torch==2.13.0+cpu/torch==2.13.0/'
} > constraints.txt.tmp
mv constraints.txt.tmp constraints.txt
