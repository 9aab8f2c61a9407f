#!/usr/bin/env bash
# Submit a generation run to a running Ray cluster as a Ray job.
#   RAY_ADDRESS=http://HEAD:8265 cluster/submit.sh configs/demo.yaml [datagen generate args...]
# Token auth (Ray >= 2.52; on by default for new clusters): the submitter needs the cluster's
# token, read from $RAY_AUTH_TOKEN, else the file at $RAY_AUTH_TOKEN_PATH, else
# ~/.ray/auth_token. Get it on the head with `ray get-auth-token` and copy it to that file, or
# export RAY_AUTH_TOKEN in the submitting shell (never put it in the config or the repo).
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:?usage: cluster/submit.sh CONFIG [datagen generate args...]}"; shift
: "${RAY_ADDRESS:?set RAY_ADDRESS to the head's dashboard address, e.g. http://head:8265}"
exec ray job submit --address "$RAY_ADDRESS" --working-dir . \
  --runtime-env cluster/runtime_env.yaml \
  -- python -m datagen generate --config "$config" "$@"
