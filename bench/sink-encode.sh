#!/usr/bin/env bash
# Cost of encoding a batch and writing its Arrow file to /dev/shm, with the sink's pooled Arrow
# memory (ArrowMemoryPool) and with Arrow's default allocator, side by side: PAIRS alternating
# pairs of fresh JVMs (SinkEncodeBench). Prints RESULT lines; see bench/README.md.
#   bench/sink-encode.sh [PAIRS] [BATCHES] [SAMPLES] [PATCHES]      default 3 60 8 1024
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-3}; BATCHES=${2:-60}; SAMPLES=${3:-8}; PATCHES=${4:-1024}
CP_FILE=$(pwd)/connectors/target/test-classpath.txt
# -am: the modules come from this checkout, not from ~/.m2
mvn -o -q -B -pl connectors -am package -DskipTests -Dspotless.check.skip=true -Dcheckstyle.skip
mvn -o -q -B -pl connectors -am dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$CP_FILE"
CP="connectors/target/test-classes:connectors/target/classes:operators/target/classes:$(cat "$CP_FILE")"
for _ in $(seq "$PAIRS"); do
  for mode in unpooled pooled; do
    java -Xms2g -Xmx2g --add-opens=java.base/java.nio=ALL-UNNAMED \
      -Dlog4j.configurationFile=file:$(pwd)/connectors/src/test/resources/log4j2-test.properties \
      -cp "$CP" dev.stoker.connectors.shm.SinkEncodeBench "$mode" "$BATCHES" "$SAMPLES" "$PATCHES" | grep RESULT
  done
done
