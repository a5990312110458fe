#!/usr/bin/env bash
# The scaling ladder (bench/README.md, "Scaling ladder"): 1, 2 and 4 simulated GPU nodes x 2 ranks
# fed by one Flink job, its CPU stages packed on one CPU node (colocated) or spread over 4 (spread),
# every node's network card capped; prints one line per rung and "RESULT nodes=4 spread/colocated=X.XX",
# writes bench/results/scaling-ladder.{md,csv,json,png}. Needs root (network namespaces).
#   bench/scaling-ladder.sh [--rungs 1,2,4] [--modes colocated,spread] [--rate 25mbit]
#       [--step-time-ms 1500] [--micro-batch 2] [--warmup-s 60] [--measure-s 60] [...]
#   (bench/scaling-ladder.sh --help lists every option)
# Uses the dev venv .venv (./stoker test creates it); builds the job jar and the Flink home when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "[ladder] error: run as root (it creates network namespaces, a bridge and mounts)" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "[ladder] error: .venv is missing: run ./stoker test once (it creates the dev venv)" >&2; exit 2; }
if [ ! -f job/target/stoker-job.jar ] || [ ! -f testkit/target/stoker-testkit.jar ] \
    || [ ! -f testkit/target/runtime-classpath.txt ]; then
  echo "[ladder] building the job jar (mvn -o package)" >&2
  mvn -o -q -B package -DskipTests
fi
scripts/cluster.sh build
PYTHONPATH="$PWD:$PWD/python" exec .venv/bin/python -m bench.scaling_ladder "$@"
