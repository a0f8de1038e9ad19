#!/usr/bin/env bash
# Fetch the jars of test/java/ConfluentWireReader.java (named in test/java/pom.xml) from Maven
# Central into .cache/java-reader/libs and compile it into .cache/java-reader/classes; print the
# class path to run it with. Idempotent: each step is skipped when its stamp matches its inputs.
# Test processes run in parallel and may all ask at once: one does the work, the others wait.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pom="$root/test/java/pom.xml"
source="$root/test/java/ConfluentWireReader.java"
cache="$root/.cache/java-reader"
libs="$cache/libs"
classes="$cache/classes"
want_libs=$(sha256sum "$pom" | cut -d' ' -f1)
want_classes=$(cat "$pom" "$source" | sha256sum | cut -d' ' -f1)
fetched() { [ -f "$libs/.pom.sha256" ] && [ "$(cat "$libs/.pom.sha256")" = "$want_libs" ]; }
compiled() { [ -f "$classes/.sha256" ] && [ "$(cat "$classes/.sha256")" = "$want_classes" ]; }
# wire-schema-jvm first: it carries a descriptor.proto its parser reads (Apicurio's
# FileDescriptorUtils imports it); protobuf-java 4's copy uses syntax that wire 4.3 cannot parse.
classpath() { echo "$classes:$(echo "$libs"/wire-schema-jvm-*.jar):$libs/*"; }
if fetched && compiled; then classpath; exit 0; fi

command -v flock >/dev/null || { echo "java-reader: flock not found (util-linux)" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if fetched && compiled; then classpath; exit 0; fi
command -v java >/dev/null || { echo "java-reader: java not found (the reader needs Java 17)" >&2; exit 1; }
command -v javac >/dev/null || { echo "java-reader: javac not found (a JDK 17 is needed, not only a JRE)" >&2; exit 1; }
rm -rf "$cache"/tmp.*

if ! fetched; then
  command -v mvn >/dev/null || { echo "java-reader: mvn not found (Maven fetches the reader's jars)" >&2; exit 1; }
  echo "java-reader: downloading Avro, protobuf-java and JSON Schema jars with Maven..." >&2
  tmp=$(mktemp -d "$cache/tmp.XXXXXX")
  # Maven's output (errors only, with -q) shows only when it fails.
  mvn -q -B -Dstyle.color=never -s "$root/scripts/registry/settings.xml" -Dmaven.repo.local="$root/.cache/registry/m2" -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime >"$cache/mvn.log" 2>&1 \
    || { echo "java-reader: Maven failed to fetch the jars:" >&2; tail -n 60 "$cache/mvn.log" >&2; exit 1; }
  echo "$want_libs" > "$tmp/.pom.sha256"
  rm -rf "$libs"
  mv "$tmp" "$libs"
fi

if ! compiled; then
  echo "java-reader: compiling ConfluentWireReader..." >&2
  tmp=$(mktemp -d "$cache/tmp.XXXXXX")
  javac -nowarn -d "$tmp" -cp "$libs/*" "$source" >&2
  echo "$want_classes" > "$tmp/.sha256"
  rm -rf "$classes"
  mv "$tmp" "$classes"
fi
classpath
