#!/usr/bin/env bash
# Latency hiding of the S3 image fetch: images/s with 50 +- 20 ms injected GET latency divided by
# images/s without, same run, same data, default settings (see job/src/test/java/dev/stoker/job/S3LatencyBench.java).
#   bench/s3-latency-hiding.sh [DATASET_DIR] [REPLICAS] [ROUNDS]     whole job (default: llava-style, 8, 2)
#   bench/s3-latency-hiding.sh --fetch-only [GETS]                     the S3 fetch alone (default 3000 GETs of 100 KB)
#   bench/s3-latency-hiding.sh --throttled [GETS] [SERVER_RATE]       a prefix throttled above SERVER_RATE GET/s (default 1000, 100):
#                                                                      no client-side limit vs stoker.s3.max-gets-per-second-per-prefix at 90%
#   bench/s3-latency-hiding.sh --stragglers [GETS]                    5% of GETs 500 ms late: no hedging vs stoker.s3.hedge-after 100 ms
#   bench/s3-latency-hiding.sh --stuck [REPLICAS]                     whole job, 2% of image GETs stuck past the attempt timeout:
#                                                                      stoker.s3.hedge-after off, 250 ms, 500 ms, 1 s, 2 s (default 24 replicas)
# Needs ../shared/data (tokenizer) beside the repository. Prints one line per round and a RESULT line.
set -euo pipefail
cd "$(dirname "$0")/.."
CP_FILE=$(pwd)/job/target/test-classpath.txt
# One reactor run (-am): the modules come from this checkout, not from ~/.m2 (where they are never
# installed); each module writes the file in turn and the job's, last, stays.
mvn -q -B -pl job -am package dependency:build-classpath -DskipTests -Dmdep.includeScope=test -Dmdep.outputFile="$CP_FILE"
FLINK_PLUGINS_DIR="$(pwd)/job/target/plugins" AWS_EC2_METADATA_DISABLED=true \
  java @flink-conf/jvm-opens.args -Daws.java.v1.disableDeprecationAnnouncement=true \
  -Dlog4j.configurationFile="file:$(pwd)/job/src/test/resources/log4j2-test.properties" \
  -cp "job/target/test-classes:job/target/classes:connectors/target/classes:$(cat "$CP_FILE")" dev.stoker.job.S3LatencyBench "$@"
