#!/usr/bin/env bash
# Run a command on a Node.js that package.json's engines accept: the node on PATH if it
# does, else Node 24 fetched into .cache/node24 (scripts/node-fetch.sh) and put first on
# PATH for the command and everything it starts. So README's commands work on a machine
# whose own node is older than 22 without installing anything outside the project. Prints
# the Node version the command runs on, so a log says which one it was. OUTBOX_NODE_CHECKED
# tells scripts/with-kafka.sh, run inside, that the node on PATH was checked already.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
here=$(node --version 2>/dev/null || echo none)
if [ "$here" != none ] && node "$root/scripts/nodeVersion.mjs" check 2>/dev/null; then
  echo "with-node: running on Node $here" >&2
  OUTBOX_NODE_CHECKED=$here exec "$@"
fi
bin=$("$root/scripts/node-fetch.sh" 24)
export PATH="$bin:$PATH"
node "$root/scripts/nodeVersion.mjs" check
now=$(node --version)
echo "with-node: running on Node $now from .cache/node24 (the node on PATH, $here, is older than engines allow)" >&2
OUTBOX_NODE_CHECKED=$now exec "$@"
