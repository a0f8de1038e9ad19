#!/usr/bin/env bash
# Build Apicurio Registry (a Confluent-compatible schema registry; version pinned in
# scripts/registry/pom.xml) into .cache/registry/app (Quarkus' fast-jar layout, started with
# `java -jar .cache/registry/app/quarkus-run.jar`), from Maven Central only. Not an uber-jar:
# compressing 136 MB into one jar took 19 of its 45 CPU-seconds (a warm build, measured here).
# Idempotent: does nothing when the build for this pom is there. Two callers at once (CI builds
# it in the background while a test may ask for it) build it once: the second waits on a lock.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/scripts/registry"
cache="$root/.cache/registry"
app="$cache/app"
stamp="$cache/app.sha256"
want=$(sha256sum "$src/pom.xml" | cut -d' ' -f1)
built() { [ -f "$app/quarkus-run.jar" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }
built && exit 0

command -v flock >/dev/null || { echo "registry-fetch: flock not found (util-linux)" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
  echo "registry-fetch: another build of the registry is running; waiting for it..." >&2
  flock 9
fi
# The build we waited for may have been this one.
built && exit 0

command -v mvn >/dev/null || { echo "registry-fetch: mvn not found (Maven builds the registry from Maven Central)" >&2; exit 1; }
command -v java >/dev/null || { echo "registry-fetch: java not found (the registry needs Java 17)" >&2; exit 1; }
# Holding the lock, any build directory left is a killed build's.
rm -rf "$cache"/build.*
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$src/pom.xml" "$work/pom.xml"

echo "registry-fetch: building Apicurio Registry with Maven (about a minute; ~210 MB of downloads with an empty ~/.m2)..." >&2
start=$SECONDS
# Maven's output (errors only, with -q, and its colour resets) shows only when it fails.
# The two index-dependency flags make Quarkus index the registry's own beans (without them:
# unsatisfied CDI bean DynamicConfigStorageAccessor at start).
# A Maven repository of its own (.cache/registry/m2): CI builds the registry while Kafka's
# jars are fetched into ~/.m2, and two Maven processes should not fill one repository at once.
mvn -B -q -Dstyle.color=never -s "$src/settings.xml" -Dmaven.repo.local="$cache/m2" -f "$work/pom.xml" package \
  -DskipTests \
  -Dquarkus.package.type=fast-jar \
  -Dquarkus.index-dependency.registry.group-id=io.apicurio \
  -Dquarkus.index-dependency.registry.artifact-id=apicurio-registry-app >"$work/mvn.log" 2>&1 \
  || { echo "registry-fetch: the Maven build failed:" >&2; tail -n 60 "$work/mvn.log" >&2; exit 1; }

# The stamp goes last and names only a whole build: a build killed midway is built again.
rm -f "$stamp"
rm -rf "$app"
mv "$work/target/quarkus-app" "$app"
echo "$want" > "$work/stamp"
mv -f "$work/stamp" "$stamp"
echo "registry-fetch: built $app in $((SECONDS - start)) s" >&2
