#!/usr/bin/env bash
# Print the path of a working `promtool` (Prometheus' rule and config checker, used by
# test/deploy.test.ts), fetching it first if need be; with arguments, run it with them.
#
# Order: `promtool` on PATH; else the copy extracted before into .cache/promtool; else
# Debian's `prometheus` package, downloaded (not installed: `apt-get download`) and
# extracted with `dpkg-deb -x` into .cache/promtool. Nothing is installed system-wide.
# When the package lists are missing or stale, `apt-get update` is run if we are root;
# otherwise the script stops and says what to do. Exit 1, with the reason on stderr,
# when promtool cannot be had.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache/promtool"
extracted="$cache/root/usr/bin/promtool"

say() { echo "promtool.sh: $*" >&2; }
found() {
  if [ "$#" -gt 1 ]; then exec "$1" "${@:2}"; fi
  echo "$1"
  exit 0
}

if [ -z "${PROMTOOL_NO_PATH:-}" ] && command -v promtool >/dev/null 2>&1; then
  found "$(command -v promtool)" "$@"
fi
if [ -x "$extracted" ] && "$extracted" --version >/dev/null 2>&1; then
  found "$extracted" "$@"
fi

for tool in apt-get dpkg-deb; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "promtool is not on PATH and $tool is missing, so Debian's prometheus package cannot be fetched; install Prometheus' promtool and put it on PATH"
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/promtool-fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
download() { (cd "$work" && apt-get download -q prometheus) >"$work/apt.log" 2>&1; }

say "promtool not found; downloading Debian's prometheus package into .cache/promtool (not installed system-wide)..."
if ! download; then
  if [ "$(id -u)" -eq 0 ]; then
    say "apt-get download failed ($(tail -n 1 "$work/apt.log")); running apt-get update"
    if ! apt-get update -qq >"$work/update.log" 2>&1; then
      say "apt-get update failed: $(tail -n 3 "$work/update.log")"
      exit 1
    fi
    if ! download; then
      say "apt-get download prometheus failed after apt-get update: $(tail -n 3 "$work/apt.log")"
      exit 1
    fi
  else
    say "apt-get download prometheus failed: $(tail -n 3 "$work/apt.log")"
    say "the package lists may be missing or stale: run 'sudo apt-get update' (or install promtool and put it on PATH), then run the tests again"
    exit 1
  fi
fi

deb=$(ls "$work"/prometheus_*.deb 2>/dev/null | head -n 1)
if [ -z "$deb" ]; then
  say "apt-get download succeeded but left no prometheus_*.deb: $(tail -n 3 "$work/apt.log")"
  exit 1
fi
mkdir -p "$work/root"
dpkg-deb -x "$deb" "$work/root"
if ! "$work/root/usr/bin/promtool" --version >/dev/null 2>&1; then
  say "the extracted $work/root/usr/bin/promtool does not run"
  exit 1
fi
# Replace the cache in one rename, so that concurrent runs never see half a tree.
mkdir -p "$cache"
rm -rf "$cache/root.old"
[ -d "$cache/root" ] && mv "$cache/root" "$cache/root.old"
mv "$work/root" "$cache/root"
rm -rf "$cache/root.old"
say "promtool $("$extracted" --version 2>&1 | head -n 1 | awk '{print $3}') at .cache/promtool/root/usr/bin/promtool"
found "$extracted" "$@"
