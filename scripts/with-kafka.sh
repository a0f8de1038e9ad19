#!/usr/bin/env bash
# Run a command with KAFKA_BROKERS pointing at a real broker: the one given in
# KAFKA_BROKERS, or a local single-node broker started for the command and stopped after.
# Everything runs on a node that engines accept (scripts/with-node.sh, which fetches Node 24
# when the machine's own is older): the broker's start script too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${OUTBOX_NODE_CHECKED:-}" ]; then
  exec "$root/scripts/with-node.sh" "$0" "$@"
fi
if [ -n "${KAFKA_BROKERS:-}" ]; then
  exec "$@"
fi
dir="$root/.cache/kafka/run/with-kafka-$$"
cleanup() { "$root/node_modules/.bin/tsx" "$root/scripts/localKafka.ts" stop --dir "$dir" || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
echo "with-kafka: starting a local Kafka broker..." >&2
KAFKA_BROKERS=$("$root/node_modules/.bin/tsx" "$root/scripts/localKafka.ts" start --dir "$dir")
export KAFKA_BROKERS
echo "with-kafka: Kafka at $KAFKA_BROKERS" >&2
set +e
"$@"
status=$?
set -e
exit $status
