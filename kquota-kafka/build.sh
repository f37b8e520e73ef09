#!/usr/bin/env bash
# Builds kquota's Kafka plug-in: the native library (cargo, release) and the jar that carries it
# (Maven). Prints the jar's absolute path on its last line.
#
#   bash kquota-kafka/build.sh
#
# Needs cargo, java 17+ and mvn; Maven fetches kafka-clients (provided scope) from Maven Central on
# the first run. Install the jar by copying it into Kafka's libs/ (docs/kafka.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

die() {
  echo "kquota-kafka/build.sh: error: $*" >&2
  exit 1
}

for tool in cargo java mvn; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done

cargo build --release -p kquota-kafka >&2
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
LIB="$TARGET_DIR/release/libkquota_kafka.so"
[ -f "$LIB" ] || die "cargo built no $LIB"

LOG="$ROOT/kquota-kafka/java/target/mvn.log"
mkdir -p "$(dirname "$LOG")"
if ! (cd kquota-kafka/java && mvn -B -q package -Dkquota.native.dir="$TARGET_DIR/release" >"$LOG" 2>&1); then
  tail -n 40 "$LOG" >&2
  die "Maven could not build the jar (full log: $LOG)"
fi
JAR="$ROOT/kquota-kafka/java/target/kquota-kafka-0.1.0.jar"
[ -f "$JAR" ] || die "Maven built no $JAR"
unzip -l "$JAR" | grep -q "io/kquota/kafka/native/linux-x86_64/libkquota_kafka.so" ||
  die "$JAR does not hold the native library"
echo "$JAR"
