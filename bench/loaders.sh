#!/usr/bin/env bash
# Loaders side by side (bench/README.md): the naive serial loop, PyTorch DataLoader, Ray actors,
# Ray Data and Stoker (embedded Flink and the standalone cluster) on the same dataset, the same
# local S3 server with 50 +- 20 ms per GET and the same cores; writes bench/results/loaders.*
#   bench/loaders.sh [--samples N] [--quick] [--batch-size B] [--cores C] [--contenders a,b,...] [--rounds R] [--steady-from F]
#       [--stall-s S] [--s3-pause AT:SECONDS] [--s3-unanswered RATE:SECONDS] [--job-option KEY=VALUE ...]  (--help)
# Sets up what is missing first: the job jar and classpaths (offline Maven build), the Flink home
# of the standalone cluster, and the bench venv .stoker/bench-venv (bench/requirements.txt, pinned;
# torch pulls ~5 GB of CUDA runtime wheels, no GPU is used).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.stoker/bench-venv
if [ ! -f "$VENV/.installed" ] || [ bench/requirements.txt -nt "$VENV/.installed" ]; then
  echo "[loaders] creating $VENV (bench/requirements.txt)" >&2
  python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r bench/requirements.txt
  touch "$VENV/.installed"
fi
if [ ! -f job/target/stoker-job.jar ] || [ ! -f job/target/runtime-classpath.txt ] \
    || [ ! -f testkit/target/stoker-testkit.jar ] || [ ! -f testkit/target/runtime-classpath.txt ] \
    || [ ! -f operators/target/test-classpath.txt ]; then
  echo "[loaders] building the job jar (mvn -o package)" >&2
  mvn -o -q -B package -DskipTests  # also writes the job's and the testkit's classpath files
  mvn -o -q -B -pl operators dependency:build-classpath -Dmdep.includeScope=test \
    -Dmdep.outputFile="$PWD/operators/target/test-classpath.txt"
fi
[[ " $* " == *"--contenders"* && " $* " != *"stoker-cluster"* ]] || scripts/cluster.sh build
PYTHONPATH="$PWD:$PWD/python" exec "$VENV/bin/python" -m bench.loaders.run "$@"
