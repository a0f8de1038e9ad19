#!/usr/bin/env bash
# Fetch Node.js MAJOR from the npm registry into .cache/node<MAJOR> unless it is there, and
# print the directory of its binary. The registry ships each platform's official binary as
# the package node-<platform>-<arch> (bin/node), so this needs npm and nothing else, and
# installs nothing outside the project. Used by scripts/with-node.sh and .ci/run.
#
#   scripts/node-fetch.sh MAJOR
set -euo pipefail
major=${1:?usage: scripts/node-fetch.sh MAJOR}
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.cache/node$major"
pkg="node-$(node -p 'process.platform + "-" + process.arch')"
bin="$dir/node_modules/$pkg/bin"
have=$([ -x "$bin/node" ] && "$bin/node" --version || true)
case "$have" in
  "v$major."*) ;;
  *)
    echo "node-fetch: fetching Node $major (npm package $pkg@$major) into .cache/node$major" >&2
    # npm's own output only when it fails: the line above is what a reader needs.
    if ! out=$(npm install --prefix "$dir" --no-save --no-audit --no-fund --no-package-lock "$pkg@$major" 2>&1); then
      echo "$out" >&2
      echo "node-fetch: npm could not install $pkg@$major" >&2
      exit 1
    fi
    have=$("$bin/node" --version)
    case "$have" in
      "v$major."*) ;;
      *) echo "node-fetch: $pkg@$major installed $have, not Node $major" >&2; exit 1 ;;
    esac
    ;;
esac
echo "$bin"
