#!/usr/bin/env bash
# The resize (and the whole transform) under two JDKs, side by side in one run: the same classes
# (compiled for Java 17) on JDK 17 (A, the product's runtime) and on a newer JDK (B), to see whether
# the newer C2 auto-vectorises BicubicResampler better. TransformCeilingBench modes resize-only
# and tj over the transform-ceiling sets, each in a fresh JVM, the two JDKs alternating per round.
#   bench/resize-jdk.sh [ROUNDS] [WARMUP_S] [REPEAT_S] [REPEATS]      default 3 2 1 5
# JAVA_A / JAVA_B: the two java binaries (default: `java` on PATH, and Temurin 25 under
# /usr/lib/jvm). MAX_PIXELS as in transform-ceiling.sh (default 1003520). Run it under the heavy
# lock; prints the RESULT lines with a jdk= field in front (CPU ms per image, median of repeats).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}; WARMUP=${2:-2}; REPEAT=${3:-1}; REPEATS=${4:-5}
VENV=${VENV:-.venv}
MAX_PIXELS=${MAX_PIXELS:-1003520}
JAVA_A=${JAVA_A:-java}
JAVA_B=${JAVA_B:-/usr/lib/jvm/temurin-25-jdk-amd64/bin/java}
source bench/ceiling-setup.sh
for jdk in A B; do
  java_bin=JAVA_$jdk
  echo "jdk=$jdk: $("${!java_bin}" -version 2>&1 | head -1)"
done
for round in $(seq "$ROUNDS"); do
  for set in hd large; do
    for mode in resize-only tj; do
      for jdk in A B; do
        java_bin=JAVA_$jdk
        # shellcheck disable=SC2086
        "${!java_bin}" $JAVA_OPTS -cp "$CP" dev.stoker.operators.image.TransformCeilingBench \
            "$set" "$WORK/$set" "$MAX_PIXELS" "$WARMUP" "$REPEAT" "$REPEATS" 1 "$mode" \
          | grep RESULT | sed "s/^RESULT/RESULT round=$round jdk=$jdk/"
      done
    done
  done
done
