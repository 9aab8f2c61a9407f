#!/usr/bin/env bash
# Submit a generation or a training run to a running Ray cluster as a Ray job; prints the
# job's logs until it ends and exits non-zero if the job failed.
#   RAY_ADDRESS=http://HEAD:8265 cluster/submit.sh generate configs/demo.yaml [datagen generate args...]
#   RAY_ADDRESS=http://HEAD:8265 cluster/submit.sh fit configs/train_tiny.yaml [trainer fit args...]
# Token auth (Ray >= 2.52; on by default for new clusters): the submitter needs the cluster's
# token, read from $RAY_AUTH_TOKEN, else the file at $RAY_AUTH_TOKEN_PATH, else
# ~/.ray/auth_token. Get it on the head with `ray get-auth-token` and copy it to that file, or
# export RAY_AUTH_TOKEN in the submitting shell (never put it in the config or the repo).
# Paths in the arguments (--out, --set run_dir=..., shards, tokenizer) must be ones every node
# reaches: a shared filesystem (or, for datagen output, an object-store URI).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: cluster/submit.sh generate|fit CONFIG [args...]"
command="${1:?$usage}"; config="${2:?$usage}"; shift 2
case "$command" in
  generate) entrypoint=(python -m datagen generate --config "$config") ;;
  fit) entrypoint=(python -m trainer fit --config "$config") ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
: "${RAY_ADDRESS:?set RAY_ADDRESS to the dashboard address of the head, e.g. http://head:8265}"
exec ray job submit --address "$RAY_ADDRESS" --working-dir . \
  --runtime-env cluster/runtime_env.yaml \
  -- "${entrypoint[@]}" "$@"
