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

if ! command -v apt-get >/dev/null 2>&1; then
  say "pgbouncer is not on PATH and apt-get is missing; install PgBouncer (1.18 or later) and put it on PATH"
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  say "pgbouncer is not on PATH; installing Debian's pgbouncer package needs root: run 'sudo apt-get install pgbouncer', then run the tests again"
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pgbouncer-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=120 pgbouncer >"$work/apt.log" 2>&1
}

say "pgbouncer not found; installing Debian's pgbouncer package (apt-get install)..."
if ! install; then
  say "apt-get install failed ($(tail -n 1 "$work/apt.log")); running apt-get update"
  if ! apt-get update -qq >"$work/update.log" 2>&1; then
    say "apt-get update failed: $(tail -n 3 "$work/update.log")"
    exit 1
  fi
  if ! install; then
    say "apt-get install pgbouncer failed after apt-get update: $(tail -n 3 "$work/apt.log")"
    exit 1
  fi
fi

if ! path=$(find_pgbouncer); then
  say "apt-get installed the pgbouncer package but no working pgbouncer is on PATH or in /usr/sbin: $(tail -n 3 "$work/apt.log")"
  exit 1
fi
say "$("$path" --version 2>&1 | head -n 1) at $path"
echo "$path"
