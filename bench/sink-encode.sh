#!/usr/bin/env bash
# Cost of encoding a batch and writing its Arrow file to /dev/shm, side by side: PAIRS rounds of
# fresh JVMs (SinkEncodeBench), one per allocator mode (MODES: the sink's pooled Arrow memory,
# ArrowMemoryPool, and Arrow's default allocator) and pixel_values element type (DTYPES:
# stoker.image.pixel-dtype), alternating. Prints RESULT lines (with the batch file's size); see
# bench/README.md.
#   bench/sink-encode.sh [PAIRS] [BATCHES] [SAMPLES] [PATCHES]      default 3 60 8 1024
#   MODES=pooled DTYPES="FLOAT32 UINT8" bench/sink-encode.sh        defaults "unpooled pooled", FLOAT32
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-3}; BATCHES=${2:-60}; SAMPLES=${3:-8}; PATCHES=${4:-1024}
MODES=${MODES:-unpooled pooled}; DTYPES=${DTYPES:-FLOAT32}
CP_FILE=$(pwd)/connectors/target/test-classpath.txt
# One reactor run (-am): the modules come from this checkout, not from ~/.m2 (where they are never
# installed); each module writes the file in turn and the connectors', last, stays.
mvn -o -q -B -pl connectors -am package dependency:build-classpath -DskipTests \
  -Dspotless.check.skip=true -Dcheckstyle.skip -Dmdep.includeScope=test -Dmdep.outputFile="$CP_FILE"
CP="connectors/target/test-classes:connectors/target/classes:operators/target/classes:$(cat "$CP_FILE")"
for _ in $(seq "$PAIRS"); do
  for mode in $MODES; do
    for dtype in $DTYPES; do
      java -Xms2g -Xmx2g @flink-conf/jvm-opens.args \
        -Dlog4j.configurationFile=file:$(pwd)/connectors/src/test/resources/log4j2-test.properties \
        -cp "$CP" dev.stoker.connectors.shm.SinkEncodeBench "$mode" "$dtype" "$BATCHES" "$SAMPLES" "$PATCHES" | grep RESULT
    done
  done
done
