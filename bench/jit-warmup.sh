#!/usr/bin/env bash
# How soon the embedded job reaches its steady rate, under different JVM settings, side by side in
# one run: bench/loaders.sh with the stoker-embedded contender only, the variants alternating per
# round. Each variant adds options to the job's JVM only (a `java` wrapper on PATH that adds them
# when the command runs dev.stoker.job.StokerJob; the local S3 server and the ceiling bench keep
# theirs). Prints, per run, the steady rate, the rate from the first batch, their ratio (the goal:
# >= 0.9 on 2000 samples) and the time to first batch; see bench/README.md.
#   bench/jit-warmup.sh [ROUNDS] [SAMPLES] [VARIANTS...]     default 2 2000 base cds scale
# Variants: base (today's options), cds (an AppCDS archive of the job's classes, made by one
# untimed training run with -XX:ArchiveClassesAtExit first, then -XX:SharedArchiveFile), scale
# (-XX:CompileThresholdScaling=0.25: the tiers' thresholds at a quarter, C1 and C2 start sooner),
# c1 (-XX:TieredStopAtLevel=1: C1 only, for reference). Run it under the heavy lock.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}; SAMPLES=${2:-2000}; shift 2 || true
VARIANTS=("$@"); [ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(base cds scale)
WORK=$(mktemp -d /tmp/stoker-jit-warmup.XXXXXX)
ARCHIVE=$WORK/stoker-job.jsa
REAL_JAVA=$(command -v java)
mkdir -p "$WORK/bin"
cat > "$WORK/bin/java" <<EOF
#!/usr/bin/env bash
for a in "\$@"; do
  if [ "\$a" = dev.stoker.job.StokerJob ]; then exec "$REAL_JAVA" \$STOKER_JOB_EXTRA_OPTS "\$@"; fi
done
exec "$REAL_JAVA" "\$@"
EOF
chmod +x "$WORK/bin/java"
opts() {
  case "$1" in
    base) echo "" ;;
    cds) echo "-XX:SharedArchiveFile=$ARCHIVE" ;;
    cds-train) echo "-XX:ArchiveClassesAtExit=$ARCHIVE" ;;
    scale) echo "-XX:CompileThresholdScaling=0.25" ;;
    c1) echo "-XX:TieredStopAtLevel=1" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
run() {  # variant, label
  local out=$WORK/$2
  PATH="$WORK/bin:$PATH" STOKER_JOB_EXTRA_OPTS="$(opts "$1")" \
    bench/loaders.sh --contenders stoker-embedded --samples "$SAMPLES" --pass2-samples 64 \
    --out "$out" > "$out.log" 2>&1 || { tail -20 "$out.log"; return 1; }
  python3 - "$out/loaders.json" "$2" "$(opts "$1")" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
r = next(x for x in rows if x["contender"] == "stoker-embedded")
s, f = r["samples_per_s"], r["samples_per_s_from_first_batch"]
print(f"RUN {sys.argv[2]:<10} steady={s:.2f} from_first={f:.2f} ratio={f / s:.3f} "
      f"first_batch_s={r['time_to_first_batch_s']:.1f} opts='{sys.argv[3]}'")
EOF
}
if [[ " ${VARIANTS[*]} " == *" cds "* ]]; then
  run cds-train cds-train > /dev/null
  ls -l "$ARCHIVE"
fi
n=0
for round in $(seq "$ROUNDS"); do
  for v in "${VARIANTS[@]}"; do
    n=$((n + 1))
    run "$v" "$v-$n"
  done
done
echo "runs in $WORK"
