#!/usr/bin/env bash
# Screenshots of the Flink web UI while a Stoker job runs on the standalone cluster
# (scripts/cluster.sh, in a temporary directory) and a simulated trainer reads its batches.
#
#   scripts/webui-screenshot.sh [OUT.png]             docs/webui-metrics.png: Stoker's tuning metrics
#   scripts/webui-screenshot.sh --rescale [OUT.png]   docs/webui-rescale.png: the web UI's rescale editor
#
# metrics (the default): the sink's metrics of rank 0 in the Metrics tab, charts set to Big.
# --rescale: the cluster runs the adaptive scheduler with web.rescale.enable: true, a 10 s cooldown
# after a rescale and 3 slots per TaskManager (6); in the job's Overview tab the CPU stages' vertex
# (`Source: jsonl-source -> ...`) is scaled from 2 to 4 subtasks with the + button of the Scale
# column. Fails (exit 1, OUT.failed.png) unless the web UI sends the new upper bound, the vertex runs
# 4 subtasks within 240 s, the trainer acknowledges 3 more steps after it, the job is RUNNING with
# no exception and at most the rescale's restart (numRestarts <= 1), and Flink's rescale history
# (web.adaptive-scheduler.rescale-history.size=10) has one more completed rescale.
# Both modes: the job runs on one GPU node (placement ANY), DP world size 2, micro-batch size 2, a
# trainer at 1.5 s per step; see scripts/webui-screenshot/screenshot.mjs for the browser's steps.
#
# Needs: the job jar (mvn package), the venv (.venv, see ./stoker), Node.js/npm (playwright-core
# from the npm registry, scripts/webui-screenshot/package-lock.json) and a Chromium binary: $CHROMIUM,
# else `chromium` on PATH, else (as root) Debian's package is installed with apt-get; free ports
# $STOKER_REST_PORT (18181) and $STOKER_JM_RPC_PORT (16223).
# Everything it starts (a cluster in a temporary directory, the trainer) is stopped on exit; the
# cluster's logs are kept in .stoker/logs/webui-screenshot.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
MODE=metrics
if [ "${1:-}" = --rescale ]; then MODE=rescale; shift; fi
case "${1:-}" in -*) echo "usage: $0 [--rescale] [OUT.png]" >&2; exit 2 ;; esac
OUT=$(realpath -m "${1:-$REPO/docs/webui-$MODE.png}")
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
CLUSTER_OPTS=(-D metrics.fetcher.update-interval=1000)
EPOCHS=4
if [ "$MODE" = rescale ]; then
  # the in-place rescale of docs/operator-guide.md, with room for the CPU stages to grow (3 slots
  # per TaskManager), the Rescales tab's history, and enough epochs (16 steps each) for the trainer
  # to run through the rescale
  CLUSTER_OPTS+=(-D jobmanager.scheduler=adaptive -D web.rescale.enable=true
    -D "jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling=10 s"
    -D taskmanager.numberOfTaskSlots=3 -D web.adaptive-scheduler.rescale-history.size=10)
  EPOCHS=20
fi
"$REPO/scripts/cluster.sh" start "${CLUSTER_OPTS[@]}"
JOBOUT=$("$REPO/scripts/cluster.sh" flink run -d "$REPO/job/target/stoker-job.jar" \
  --stoker.dataset.path "$DATASET" --stoker.tokenizer.path "$(cd "$REPO/../shared/data/tokenizers/qwen3" && pwd)" \
  --stoker.output.root "$OUTROOT" --stoker.job-name stoker-screenshot --stoker.dp-world-size 2 \
  --stoker.micro-batch-size 2 --stoker.image.max-pixels 200704 --stoker.epochs "$EPOCHS")
JOB=$(echo "$JOBOUT" | sed -n 's/.*JobID \([0-9a-f]\{32\}\).*/\1/p')
[ -n "$JOB" ] || die "no job id in: $JOBOUT"
# a trainer slower than the pipeline, so the job runs at its prefetch bound (4 epochs: 64 steps of
# 1.5 s, the job still runs when the screenshot is taken; 20 epochs with --rescale)
"$REPO/.venv/bin/python" -m stoker_tools.simulate --root "$OUTROOT/stoker-screenshot" --step-time-ms 1500 \
  --timeout-s 300 --progress-interval-s 10 >/dev/null &
SIM=$!
log "job $JOB running; waiting for the trainer's first acknowledgements"
acked() { compgen -G "$OUTROOT/stoker-screenshot/gen-*/rank-1/ack.json" >/dev/null; }
for _ in $(seq 1 120); do acked && break; sleep 1; done
acked || die "the trainer acknowledged nothing within 120 s; see $STOKER_CLUSTER_DIR/log"
sleep 5
mkdir -p "$(dirname "$OUT")"
if [ "$MODE" = metrics ]; then
  node "$REPO/scripts/webui-screenshot/screenshot.mjs" --rest "http://127.0.0.1:$STOKER_REST_PORT" \
    --job "$JOB" --out "$OUT" --chromium "$CHROMIUM"
else
  node "$REPO/scripts/webui-screenshot/screenshot.mjs" --mode rescale \
    --rest "http://127.0.0.1:$STOKER_REST_PORT" --job "$JOB" --out "$OUT" --chromium "$CHROMIUM" \
    --trainer-root "$OUTROOT/stoker-screenshot" || die "the rescale from the web UI failed (see above, $OUT.failed.png)"
  kill -0 "$SIM" 2>/dev/null || die "the simulated trainer exited during the rescale"
  STATE=$(curl -sf --max-time 5 "http://127.0.0.1:$STOKER_REST_PORT/jobs/$JOB" \
    | "$REPO/.venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["state"])')
  [ "$STATE" = RUNNING ] || die "the job is $STATE after the rescale"
  log "rescaled from the web UI; the job is RUNNING and the trainer still reads"
fi
