#!/usr/bin/env bash
# Demo: generate trajectories with the oracle teacher on a local Ray (CPU) and summarise them.
# Extra arguments go to `datagen generate`, e.g. scripts/demo.sh --num-trajectories 10000
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
.venv/bin/datagen generate --config configs/demo.yaml "$@"
