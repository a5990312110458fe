#!/usr/bin/env bash
# Compute ceiling of the image stage (decode + resize + normalize + patchify), side by side in one
# run on the same cores: libjpeg-turbo decode alone (the ceiling), Stoker's transform with each
# decoder/mode (TransformCeilingBench), and the Pillow + NumPy peer (bench/pillow_peer.py), over
# two JPEG sets (bench/make_jpeg_sets.py: 6 x 1920x1080 q90 4:2:0, and 5 shared photos of 2-12 MP).
# No I/O, no Flink. Prints RESULT lines and then the ratios; see bench/README.md.
#   bench/transform-ceiling.sh [WARMUP_S] [REPEAT_S] [REPEATS]      default 2 1 5
# MAX_PIXELS (default 1003520 = 1280*28*28, a common Qwen2-VL setting; the preset's 12845056 keeps a
# 1920x1080 photo at full size) bounds smart_resize for Stoker and the peer alike.
# Needs ../shared/data beside the repository and the venv (.venv, or /work/main/.venv via VENV=).
set -euo pipefail
cd "$(dirname "$0")/.."
WARMUP=${1:-2}; REPEAT=${2:-1}; REPEATS=${3:-5}
VENV=${VENV:-.venv}
MAX_PIXELS=${MAX_PIXELS:-1003520}
source bench/ceiling-setup.sh
JAVA="java $JAVA_OPTS -cp $CP dev.stoker.operators.image.TransformCeilingBench"
OUT=$WORK/results.txt
: > "$OUT"
for set in hd large; do
  $JAVA "$set" "$WORK/$set" "$MAX_PIXELS" 0 0 1 1 dct-diff | tee -a "$OUT"
  # each mode in a fresh JVM, so no mode inherits another's heap or JIT profile
  for mode in tj-decode tj-decode-dct imageio tj tj-dct resize-only patchify-only; do
    $JAVA "$set" "$WORK/$set" "$MAX_PIXELS" "$WARMUP" "$REPEAT" "$REPEATS" 1 "$mode" | grep RESULT | tee -a "$OUT"
  done
  "$VENV/bin/python" bench/pillow_peer.py "$set" "$WORK/$set" "$MAX_PIXELS" "$WARMUP" "$REPEAT" "$REPEATS" \
      | tee -a "$OUT"
  for mode in tj-decode tj; do
    $JAVA "$set" "$WORK/$set" "$MAX_PIXELS" "$WARMUP" "$REPEAT" "$REPEATS" 2 "$mode" | grep RESULT | tee -a "$OUT"
  done
done
"$VENV/bin/python" bench/ratios.py "$OUT"
