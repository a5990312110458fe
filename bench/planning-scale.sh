#!/usr/bin/env bash
# Planning at scale (issue 35): a generated mixture of SOURCES sources (default 40, 4 JSONL files
# each) at each record count, planned the first time (every file read and indexed) and again with
# the record indexes reused; beside the time to read the files once (the limit of a first
# planning), the heap the plan keeps and the size of the serialized source (see
# job/src/test/java/dev/stoker/job/PlanningScaleBench.java).
#   bench/planning-scale.sh [WORK_DIR] [RECORDS,...] [SOURCES] [FILES_PER_SOURCE]
#   default: .stoker/bench-planning 1000000,5000000,20000000 40 4 (about 2.3 GB of JSONL at 20M)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-.stoker/bench-planning}
RECORDS=${2:-1000000,5000000,20000000}
mkdir -p "$WORK"
JVM_OPENS=$(sed -n 's/^JVM_OPENS="\(.*\)"$/\1/p' stoker)
CP_FILE=$(pwd)/job/target/test-classpath.txt
mvn -q -B -pl job -am package dependency:build-classpath -DskipTests -Dmdep.includeScope=test -Dmdep.outputFile="$CP_FILE"
java $JVM_OPENS -Xmx4g \
  -Dlog4j.configurationFile="file:$(pwd)/job/src/test/resources/log4j2-test.properties" \
  -cp "job/target/test-classes:job/target/classes:connectors/target/classes:$(cat "$CP_FILE")" \
  dev.stoker.job.PlanningScaleBench "$WORK" "$RECORDS" "${3:-40}" "${4:-4}"
