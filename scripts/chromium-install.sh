#!/usr/bin/env bash
# Print the path of a working Chromium for the browser tests (test/helpers/browser.ts
# drives it with playwright-core, whose own browser download is never used), installing
# it first if need be.
#
# The tests use /usr/bin/chromium, Debian's `chromium` package (the browser and the
# libraries it needs; --no-install-recommends leaves out fonts and extras the tests do not
# need). When it is missing, the package is installed with apt-get; when the package is
# not found, `apt-get update` is run first. Installing needs root; otherwise the script
# stops and says what to do. Idempotent; on success it prints the path on stdout and
# nothing else unless it had to install (then it says so on stderr). Exit 1, with the
# reason on stderr, when Chromium cannot be had.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

say() { echo "chromium-install.sh: $*" >&2; }
working() { [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1; }

if working; then
  echo "$CHROMIUM"
  exit 0
fi

started=$(date +%s)
say "$CHROMIUM not found"
# shellcheck source=apt-install.sh
. "$(dirname "$0")/apt-install.sh"
apt_install chromium chromium-install.sh || exit 1

if ! working; then
  say "apt-get installed the chromium package but $CHROMIUM does not run: $("$CHROMIUM" --version 2>&1 | tail -n 3 || true)"
  exit 1
fi
say "installed $("$CHROMIUM" --version 2>/dev/null | head -n 1) at $CHROMIUM in $(( $(date +%s) - started )) s"
echo "$CHROMIUM"
