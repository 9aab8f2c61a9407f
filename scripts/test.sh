#!/usr/bin/env bash
# Install what the tests need into .venv and run the whole CPU test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/mutators -x
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh test
.venv/bin/python -m pytest "$@"
