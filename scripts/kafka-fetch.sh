#!/usr/bin/env bash
# Download Apache Kafka's jars (version pinned in scripts/kafka/pom.xml) from Maven Central
# into .cache/kafka/libs. Idempotent: does nothing when the jars for this pom are there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pom="$root/scripts/kafka/pom.xml"
libs="$root/.cache/kafka/libs"
stamp="$libs/.pom.sha256"
want=$(sha256sum "$pom" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
command -v mvn >/dev/null || { echo "kafka-fetch: mvn not found (Maven is needed to fetch Kafka's jars)" >&2; exit 1; }
command -v java >/dev/null || { echo "kafka-fetch: java not found (Kafka needs Java 17)" >&2; exit 1; }
rm -rf "$libs"
mkdir -p "$libs"
echo "kafka-fetch: downloading Kafka jars with Maven..." >&2
mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$libs" -DincludeScope=runtime >&2
echo "$want" > "$stamp"
