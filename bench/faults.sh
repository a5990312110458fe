#!/usr/bin/env bash
# Faults and the prefetch (bench/README.md, "Faults and the prefetch"): a GPU node, a CPU node and
# the S3 server each cut off the network for a while (simulated nodes: 2 GPU nodes x 2 ranks, 2 CPU
# nodes); per fault the detection, the time to RUNNING after the cut and after the heal, the job's
# failures and each trainer's longest wait; every (step, rank) exactly once. Writes
# bench/results/faults-<label>.{md,json}. Needs root (network namespaces).
#   bench/faults.sh [--label run] [--faults gpu1:20,cpu1:20,s3:15] [--prefetch-depth 30]
#       [--step-time-ms 2000] [--conf key=value ...] [--set key=value ...]
#   (bench/faults.sh --help lists every option)
# Uses the dev venv .venv (./stoker test creates it); builds the job jar and the Flink home when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "[faults] error: run as root (it creates network namespaces, a bridge and mounts)" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "[faults] error: .venv is missing: run ./stoker test once (it creates the dev venv)" >&2; exit 2; }
if [ ! -f job/target/stoker-job.jar ] || [ ! -f testkit/target/stoker-testkit.jar ] \
    || [ ! -f testkit/target/runtime-classpath.txt ]; then
  echo "[faults] building the job jar (mvn -o package)" >&2
  mvn -o -q -B package -DskipTests
fi
scripts/cluster.sh build
PYTHONPATH="$PWD:$PWD/python" exec .venv/bin/python -m bench.faults "$@"
