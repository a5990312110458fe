#!/usr/bin/env bash
# Sequence packing (bench/README.md, "Sequence packing (packing.sh)"): the embedded job unpacked and
# packed (W=4, B=4, max-seq-len = stoker.packing.max-tokens = 4096) on the shared datasets and on a
# seeded long-tailed synthetic dataset; padding fraction, per-rank token and image-patch spread,
# rows per batch and samples/s from the batch files, side by side, alternating order per round.
#   bench/packing.sh [--rounds 2] [--datasets shared,synthetic] [--shared-epochs 8]
#       [--synthetic-records 960] [--seed 26] [--quick] [--work-dir /tmp/stoker-packbench]
#   (bench/packing.sh --help lists every option)
# Writes bench/results/packing.{md,json} (--quick: packing-quick.*); exit 1 if a check failed.
# Uses the dev venv .venv (./stoker test creates it, else $STOKER_PYTHON); builds the jar when missing.
# Run it under the shared lock on a shared machine: flock -o /tmp/stoker-heavy.lock bench/packing.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${STOKER_PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "[packing] error: $PY is missing: run ./stoker test once (it creates the dev venv) or set STOKER_PYTHON" >&2; exit 2; }
if [ ! -f job/target/stoker-job.jar ] || [ ! -f job/target/runtime-classpath.txt ]; then
  echo "[packing] building the job jar (mvn -o package)" >&2
  mvn -o -q -B package -DskipTests
fi
PYTHONPATH="$PWD:$PWD/python" exec "$PY" -m bench.packing "$@"
