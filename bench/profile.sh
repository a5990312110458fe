#!/usr/bin/env bash
# Where the embedded job's CPU goes (bench/README.md): the loaders benchmark's stoker-embedded
# contender (same dataset, local S3 server with 50 +- 20 ms per GET, B = 8) with async-profiler
# attached to the job's JVM in the steady state, a CPU profile and then a wall-clock profile;
# writes bench/results/profile.{md,json} (the tables of bench/profile_breakdown.py) and the raw
# files (collapsed stacks, flame graphs, metrics, logs) to .stoker/bench-profile/.
#   bench/profile.sh [--samples 8000] [--cpu 0.35:0.65] [--wall 0.65:0.9] [--cpu-event auto|cpu|ctimer]
#                    [--cpu-interval 5ms] [--wall-interval 50ms] [--trace pkg.Class.method
#                    --trace-window 0.9:0.98] [--cores C] [--batch-size B] ...
# async-profiler comes from Maven Central (tools.profiler:async-profiler, classifier linux-x64,
# whose jar holds libasyncProfiler.so) into .stoker/async-profiler/ the first time. Needs what
# bench/loaders.sh builds (the job jar and classpaths, the bench venv); it does not build them.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.2
DIR=.stoker/async-profiler
AGENT=$DIR/$VERSION/linux-x64/libasyncProfiler.so
VENV=.stoker/bench-venv
for f in "$VENV/.installed" job/target/stoker-job.jar job/target/runtime-classpath.txt \
    testkit/target/stoker-testkit.jar testkit/target/runtime-classpath.txt; do
  [ -f "$f" ] || { echo "[profile] $f is missing: run bench/loaders.sh --quick once" >&2; exit 1; }
done
[ "$(uname -m)" = x86_64 ] || { echo "[profile] only linux-x64 is wired here" >&2; exit 1; }
if [ ! -f "$AGENT" ]; then
  echo "[profile] fetching tools.profiler:async-profiler:$VERSION:jar:linux-x64 (Maven Central)" >&2
  mkdir -p "$DIR/$VERSION"
  # from an empty directory, so that the project's pom.xml is not involved
  tmp=$(mktemp -d)
  (cd "$tmp" && mvn -q -B dependency:copy \
    -Dartifact="tools.profiler:async-profiler:$VERSION:jar:linux-x64" \
    -DoutputDirectory="$OLDPWD/$DIR/$VERSION")
  rmdir "$tmp"
  (cd "$DIR/$VERSION" && unzip -q -o "async-profiler-$VERSION-linux-x64.jar" linux-x64/libasyncProfiler.so)
fi
PYTHONPATH="$PWD:$PWD/python" exec "$VENV/bin/python" -m bench.loaders.profile_job \
  --agent "$AGENT" --command "bench/profile.sh $*" "$@"
