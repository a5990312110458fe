#!/usr/bin/env bash
# Flink's own autoscaler against Stoker (issue 40, item 3): a MiniCluster under the adaptive scheduler
# runs the job while a simulated trainer is slow, then 3x faster, then slow again, and Flink's
# standalone autoscaler (bench/autoscaler: the flink-autoscaler 1.10.0 library from Maven Central in
# its own JVM, with the Flink 1.19.1 client it is built against, talking to the cluster over REST)
# rescales the CPU stages in place. See job/src/test/java/dev/stoker/job/AutoscalerBench.java.
#   bench/autoscaler.sh [--key value ...]     e.g. --phases 120,150,150 --slow-ms 1800 --latency-ms 400
#                                             --job.autoscaler.target.utilization 0.6 (any job.autoscaler.*)
# Writes bench/results/autoscaler.md (and autoscaler-timeline.csv, autoscaler-evaluations.csv beside
# it); the autoscaler's log goes to job/target/autoscaler-bench/autoscaler.log. Takes about 10 minutes
# (the three phases, then a reference run without rescaling for the exactly-once check).
# Needs ../shared/data (dataset, tokenizer) beside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
CP_FILE=$(pwd)/job/target/test-classpath.txt
mvn -q -B -pl job -am test-compile dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$CP_FILE"
# the autoscaler's own class path (Flink 1.19.1 client + flink-autoscaler 1.10.0), never the job's
mvn -q -B -f bench/autoscaler/pom.xml compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt
AS_CP_FILE=$(pwd)/bench/autoscaler/target/autoscaler-classpath.txt
echo "$(pwd)/bench/autoscaler/target/classes:$(cat bench/autoscaler/target/classpath.txt)" > "$AS_CP_FILE"
AWS_EC2_METADATA_DISABLED=true \
  java @flink-conf/jvm-opens.args -Daws.java.v1.disableDeprecationAnnouncement=true \
  -Dlog4j.configurationFile="file:$(pwd)/job/src/test/resources/log4j2-test.properties" \
  -cp "job/target/test-classes:job/target/classes:connectors/target/classes:operators/target/classes:testkit/target/classes:$(cat "$CP_FILE")" \
  dev.stoker.job.AutoscalerBench --autoscaler-cp "$AS_CP_FILE" --out job/target/autoscaler-bench \
  --results bench/results --command "bench/autoscaler.sh $*" "$@"
