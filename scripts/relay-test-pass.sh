#!/usr/bin/env bash
# CI's second pass (.ci/run): run again, on the node first on PATH and the producer adapter
# of OUTBOX_TEST_PRODUCER, exactly the test files whose tests started a relay in the first
# pass (the files whose behaviour depends on the client; the unit tests ran in the first
# pass and depend on none), then check that each of those files started a relay again.
#
#   scripts/relay-test-pass.sh FIRST_LOG SECOND_LOG
#
# FIRST_LOG is what the first pass wrote through OUTBOX_TEST_RELAY_LOG: one line per relay
# started, naming the test file it started for (test/helpers/adapterGuard.mjs records it
# when the relay announces itself, in the test's own process or any process it started).
# Which files run here is what ran, not a guess from reading the sources; a file that
# stopped starting a relay (a test renamed, a relay no longer started on the adapter under
# test) fails the check instead of leaving that adapter untested in silence.
set -euo pipefail
first=$(realpath -m "${1:?usage: scripts/relay-test-pass.sh FIRST_LOG SECOND_LOG}")
second=$(realpath -m "${2:?usage: scripts/relay-test-pass.sh FIRST_LOG SECOND_LOG}")
cd "$(dirname "$0")/.."

if [ ! -s "$first" ]; then
  echo "relay-test-pass: $first is missing or empty: the first pass recorded no relay start" >&2
  exit 1
fi
mapfile -t files < <(grep -v '^(no test file' "$first" | sort -u)
if grep -q '^(no test file' "$first"; then
  echo "relay-test-pass: relays started outside any test file in the first pass:" >&2
  grep '^(no test file' "$first" | sort -u >&2
  exit 1
fi
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "relay-test-pass: $f (from $first) is not a file" >&2; exit 1; }
done
echo "relay-test-pass: ${#files[@]} test files started a relay in the first pass; running them again" >&2

rm -f "$second"
set +e
OUTBOX_TEST_RELAY_LOG="$second" node --import tsx --import ./test/helpers/adapterGuard.mjs --test \
  --test-concurrency=3 --test-timeout=300000 --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=./test/helpers/fileTimesReporter.mjs --test-reporter-destination=stdout "${files[@]}"
status=$?
set -e

missing=$(comm -23 <(printf '%s\n' "${files[@]}") <(sort -u "$second" 2>/dev/null || true))
if [ -n "$missing" ]; then
  echo "relay-test-pass: these files started a relay in the first pass and none in this one:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "relay-test-pass: each of the ${#files[@]} files started a relay again" >&2
exit $status
