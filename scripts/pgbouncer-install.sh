#!/usr/bin/env bash
# Print the path of a working `pgbouncer` (the connection pooler the PgBouncer tests put
# in front of Postgres: test/helpers/pgbouncer.ts), installing it first if need be.
#
# Order: `pgbouncer` on PATH (or in /usr/sbin, which a non-root PATH often lacks); else
# Debian's `pgbouncer` package is installed with apt-get (PgBouncer needs libevent and
# c-ares, which the package brings; it is a daemon, not a tool to unpack like
# promtool). When the package is not found, `apt-get update` is run first. Installing
# needs root; otherwise the script stops and says what to do. Idempotent; on success it
# prints the path on stdout and nothing else unless it had to install. Exit 1, with the
# reason on stderr, when pgbouncer cannot be had.
set -euo pipefail

say() { echo "pgbouncer-install.sh: $*" >&2; }
working() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }
find_pgbouncer() {
  local candidate
  for candidate in "$(command -v pgbouncer 2>/dev/null || true)" /usr/sbin/pgbouncer; do
    if [ -n "$candidate" ] && working "$candidate"; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if path=$(find_pgbouncer); then
  echo "$path"
  exit 0
fi

say "pgbouncer not found"
# shellcheck source=apt-install.sh
. "$(dirname "$0")/apt-install.sh"
apt_install pgbouncer pgbouncer-install.sh || exit 1

if ! path=$(find_pgbouncer); then
  say "apt-get installed the pgbouncer package but no working pgbouncer is on PATH or in /usr/sbin"
  exit 1
fi
say "$("$path" --version 2>&1 | head -n 1) at $path"
echo "$path"
