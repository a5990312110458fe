#!/usr/bin/env bash
# Takes docs/webui-metrics.png: the Flink web UI showing Stoker's tuning metrics while a job runs on
# the standalone cluster and a simulated trainer reads its batches.
#
#   scripts/webui-screenshot.sh [OUT.png]
#
# Needs: the job jar (mvn package), the venv (.venv, see ./stoker), Node.js/npm (playwright-core
# from the npm registry, scripts/webui-screenshot/package-lock.json) and a Chromium binary: $CHROMIUM,
# else `chromium` on PATH, else (as root) Debian's package is installed with apt-get.
# Everything it starts (a cluster in a temporary directory, the trainer) is stopped on exit.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(realpath -m "${1:-$REPO/docs/webui-metrics.png}")
log() { printf '\033[1m[screenshot]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

CHROMIUM=${CHROMIUM:-$(command -v chromium || true)}
if [ -z "$CHROMIUM" ]; then
  [ "$(id -u)" = 0 ] || die "no Chromium: set CHROMIUM=/path/to/chromium or install Debian's chromium package"
  log "installing Debian's chromium package"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  CHROMIUM=$(command -v chromium) || die "apt-get install chromium did not give a chromium binary"
fi
[ -f "$REPO/job/target/stoker-job.jar" ] || die "job/target/stoker-job.jar is missing (mvn package)"
[ -x "$REPO/.venv/bin/python" ] || die "the Python venv .venv is missing (./stoker test creates it)"
(cd "$REPO/scripts/webui-screenshot" && npm ci --silent --no-audit --no-fund >/dev/null)

export STOKER_CLUSTER_DIR; STOKER_CLUSTER_DIR=$(mktemp -d /tmp/stoker-screenshot-XXXXXX)
export STOKER_REST_PORT=${STOKER_REST_PORT:-18181} STOKER_JM_RPC_PORT=${STOKER_JM_RPC_PORT:-16223}
OUTROOT=$(mktemp -d /dev/shm/stoker-screenshot-XXXXXX)
SIM=""
cleanup() {
  [ -z "$SIM" ] || kill "$SIM" 2>/dev/null || true
  "$REPO/scripts/cluster.sh" stop || true
  mkdir -p "$REPO/.stoker/logs" && rm -rf "$REPO/.stoker/logs/webui-screenshot"
  cp -r "$STOKER_CLUSTER_DIR/log" "$REPO/.stoker/logs/webui-screenshot" 2>/dev/null || true
  rm -rf "$STOKER_CLUSTER_DIR" "$OUTROOT"
}
trap cleanup EXIT

DATASET=$REPO/.stoker/e2e-cluster-dataset-64
if [ ! -f "$DATASET/.complete" ]; then
  "$REPO/.venv/bin/python" "$REPO/scripts/make_sample_dataset.py" "$DATASET" --records 64 >/dev/null
  touch "$DATASET/.complete"
fi
"$REPO/scripts/cluster.sh" start -D metrics.fetcher.update-interval=1000
JOBOUT=$("$REPO/scripts/cluster.sh" flink run -d "$REPO/job/target/stoker-job.jar" \
  --stoker.dataset.path "$DATASET" --stoker.tokenizer.path "$(cd "$REPO/../shared/data/tokenizers/qwen3" && pwd)" \
  --stoker.output.root "$OUTROOT" --stoker.job-name stoker-screenshot --stoker.dp-world-size 2 \
  --stoker.micro-batch-size 2 --stoker.image.max-pixels 200704 --stoker.epochs 4)
JOB=$(echo "$JOBOUT" | sed -n 's/.*JobID \([0-9a-f]\{32\}\).*/\1/p')
[ -n "$JOB" ] || die "no job id in: $JOBOUT"
# a trainer slower than the pipeline, so the job runs at its prefetch bound (4 epochs: 64 steps of
# 1.5 s, the job still runs when the screenshot is taken)
"$REPO/.venv/bin/python" -m stoker_tools.simulate --root "$OUTROOT/stoker-screenshot" --step-time-ms 1500 \
  --timeout-s 300 --progress-interval-s 10 >/dev/null &
SIM=$!
log "job $JOB running; waiting for the trainer's first acknowledgements"
acked() { compgen -G "$OUTROOT/stoker-screenshot/gen-*/rank-1/ack.json" >/dev/null; }
for _ in $(seq 1 120); do acked && break; sleep 1; done
acked || die "the trainer acknowledged nothing within 120 s; see $STOKER_CLUSTER_DIR/log"
sleep 5
mkdir -p "$(dirname "$OUT")"
node "$REPO/scripts/webui-screenshot/screenshot.mjs" --rest "http://127.0.0.1:$STOKER_REST_PORT" \
  --job "$JOB" --out "$OUT" --chromium "$CHROMIUM"
