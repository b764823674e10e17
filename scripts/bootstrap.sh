#!/usr/bin/env bash
# Create or reuse the project virtual environment and install every workspace package
# editable, pinned by constraints.txt. Re-running is cheap: a stamp of the inputs skips
# the install when nothing changed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi

stamp_inputs=(constraints.txt requirements-workflow.txt packages/*/pyproject.toml)
stamp=$(cat "${stamp_inputs[@]}" | sha256sum | cut -c1-16)
if [ -f "$VENV/.atlas-installed" ] && [ "$(cat "$VENV/.atlas-installed")" = "$stamp" ]; then
  exit 0
fi

pip=("$VENV/bin/python" -m pip install --disable-pip-version-check -q -c constraints.txt)
# torch first and alone, exactly pinned: nothing installed later may pull a second build.
"${pip[@]}" torch==2.13.0
editables=()
for pkg in packages/*/; do
  [ -f "$pkg/pyproject.toml" ] && editables+=(-e "$pkg")
done
echo "[bootstrap] installing $((${#editables[@]} / 2)) workspace packages (editable) + workflow tools"
"${pip[@]}" -r requirements-workflow.txt "${editables[@]}"
n_torch=$("$VENV/bin/python" -m pip list 2>/dev/null | grep -cE '^torch ' || true)
[ "$n_torch" = "1" ] || { echo "[bootstrap] expected exactly one torch, found $n_torch" >&2; exit 1; }
echo "$stamp" > "$VENV/.atlas-installed"
echo "[bootstrap] environment ready: $VENV"
