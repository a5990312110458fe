#!/usr/bin/env bash
# Planning at scale (issue 35): a generated mixture of SOURCES sources (default 40, 4 JSONL files
# each) at each record count, on local files and on the testkit's S3 server (S3Proxy, its own
# process on 127.0.0.1): the time to read the files once (the limit of a first planning), planning
# the first time (every file read and indexed) and with the record indexes reused, the heap the
# plan keeps (client), the serialized job graph, the JobManager's heap with the job submitted, and
# the time from the build to the first Arrow batch in /dev/shm, first and with the indexes reused
# (see job/src/test/java/dev/stoker/job/PlanningScaleBench.java).
#   bench/planning-scale.sh [WORK_DIR] [RECORDS,...] [SOURCES] [FILES_PER_SOURCE] [STORES]
#   default: .stoker/bench-planning 1000000,5000000,20000000 40 4 local,s3
#   (about 2.7 GB of JSONL at 20M, kept in WORK_DIR twice: the files and the S3 server's copy)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-.stoker/bench-planning}
RECORDS=${2:-1000000,5000000,20000000}
mkdir -p "$WORK"
CP_FILE=$(pwd)/job/target/test-classpath.txt
mvn -q -B -pl job -am package dependency:build-classpath -DskipTests -Dmdep.includeScope=test -Dmdep.outputFile="$CP_FILE"
# Flink's S3 filesystem plugin (job/target/plugins, copied by the build), as the S3 ITCases use it
FLINK_PLUGINS_DIR=$(pwd)/job/target/plugins AWS_EC2_METADATA_DISABLED=true \
java @flink-conf/jvm-opens.args -Xmx4g -XX:+UseParallelGC -Daws.java.v1.disableDeprecationAnnouncement=true \
  -Dlog4j.configurationFile="file:$(pwd)/job/src/test/resources/log4j2-test.properties" \
  -cp "job/target/test-classes:job/target/classes:connectors/target/classes:$(cat "$CP_FILE")" \
  dev.stoker.job.PlanningScaleBench "$WORK" "$RECORDS" "${3:-40}" "${4:-4}" "${5:-local,s3}"
