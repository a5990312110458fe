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
# c1 (-XX:TieredStopAtLevel=1: C1 only, for reference), heapSIZE such as heap1g or heap1536m
# (-XmxSIZE: the heap capped, for the memory lever; the default is a quarter of the RAM), nmt
# (-XX:NativeMemoryTracking=summary: the JVM's own account of its memory, sampled with jcmd every
# 5 s; the sample with the most committed is printed by category; not a timing run). Each RUN line
# has the run's peak PSS too. Run it under the heavy lock.
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
    heap*) echo "-Xmx${1#heap}" ;;
    nmt) echo "-XX:NativeMemoryTracking=summary" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
run() {  # variant, label
  local out=$WORK/$2 sampler=
  if [ "$1" = nmt ]; then
    mkdir -p "$out.nmt"
    (while sleep 5; do
       pid=$(pgrep -f 'java .*dev[.]stoker[.]job[.]StokerJob' | head -1) || continue
       jcmd "$pid" VM.native_memory summary scale=MB > "$out.nmt/$(date +%s%N)" 2>/dev/null || true
     done) &
    sampler=$!
  fi
  PATH="$WORK/bin:$PATH" STOKER_JOB_EXTRA_OPTS="$(opts "$1")" \
    bench/loaders.sh --contenders stoker-embedded --samples "$SAMPLES" --pass2-samples 64 \
    --out "$out" > "$out.log" 2>&1 \
    || { [ -z "$sampler" ] || kill "$sampler"; tail -20 "$out.log"; return 1; }
  if [ -n "$sampler" ]; then
    kill "$sampler"
    python3 - "$out.nmt" <<'EOF'
import pathlib, re, sys
line = re.compile(r"^-?\s*(\w[\w ]*?):? \(?reserved=\d+MB, committed=(\d+)MB", re.M)
samples = [{m[1].strip(): int(m[2]) for m in line.finditer(p.read_text())}
           for p in sorted(pathlib.Path(sys.argv[1]).iterdir())]
peak = max((s for s in samples if s), key=lambda s: s.get("Total", 0))
print(f"NMT peak of {len(samples)} samples, committed MB: " + ", ".join(
    f"{name} {mb}" for name, mb in sorted(peak.items(), key=lambda kv: -kv[1]) if mb >= 8))
EOF
  fi
  python3 - "$out/loaders.json" "$2" "$(opts "$1")" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
r = next(x for x in rows if x["contender"] == "stoker-embedded")
s, f = r["samples_per_s"], r["samples_per_s_from_first_batch"]
print(f"RUN {sys.argv[2]:<10} steady={s:.2f} from_first={f:.2f} ratio={f / s:.3f} "
      f"first_batch_s={r['time_to_first_batch_s']:.1f} pss_gib={r['peak_pss_gib']:.2f} "
      f"opts='{sys.argv[3]}'")
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
