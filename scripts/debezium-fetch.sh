#!/usr/bin/env bash
# Download the jars of the benchmark's Debezium arm (Debezium embedded and its Postgres
# connector, versions pinned in bench/debezium/pom.xml) from Maven Central into
# .cache/debezium/libs. Idempotent: does nothing when the jars for this pom are there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pom="$root/bench/debezium/pom.xml"
libs="$root/.cache/debezium/libs"
stamp="$libs/.pom.sha256"
want=$(sha256sum "$pom" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
command -v mvn >/dev/null || { echo "debezium-fetch: mvn not found (Maven is needed to fetch Debezium's jars)" >&2; exit 1; }
command -v javac >/dev/null || { echo "debezium-fetch: javac not found (the Debezium arm needs a JDK 17)" >&2; exit 1; }
rm -rf "$libs"
mkdir -p "$libs"
echo "debezium-fetch: downloading Debezium jars with Maven..." >&2
mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$libs" -DincludeScope=runtime >&2
echo "$want" > "$stamp"
