#!/usr/bin/env bash
# Video preprocessing side by side (bench/README.md): per video decode + frame sampling + resize +
# normalise + patchify to pixel_values_videos, Stoker's VideoPreprocessor (VideoPreprocessBench,
# one per thread) against the peer a careful engineer writes: transformers' Qwen2VLVideoProcessor
# in torch DataLoader workers, decoding with PyAV and with torchcodec (bench/video_preprocess.py),
# on the same clips with the same settings, at 1 core and at N cores, rounds alternating the order
# (A B, then B A); then one clip's outputs compared bit for bit. Writes
# bench/results/video-preprocess.{json,md}.
#   bench/video-preprocess.sh [--sets 720p[,360p,1080p]] [--rounds R] [--passes P] [--warmup W]
#                             [--cores N] [--max-pixels M] [--peers pyav,torchcodec]
# Defaults: --sets 720p --rounds 2 --passes 2 --warmup 1 --cores $(nproc) --max-pixels 602112
# (768*28*28, a common per-frame budget for video; the qwen2-vl checkpoint's 12845056 keeps 720p
# at full size) --peers pyav,torchcodec. fps 2, min_frames 4, max_frames 768, min_pixels 3136
# (the qwen2-vl preset). "1 core" runs pin the whole process (JVM, or DataLoader main + worker) to
# one CPU with taskset.
# Sets up what is missing: the operators module and its test classpath (offline Maven build), the
# model venv .stoker/model-venv (as ./stoker does), the clips under .stoker/bench-video/clips
# (made once), and for the torchcodec peer torchcodec (bench/video-requirements.txt, pinned) in
# .stoker/bench-video/pydeps, linked to the FFmpeg 8 libraries that PyAV's wheel bundles (the
# torchcodec wheel brings no FFmpeg).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "[video-bench] error: $*" >&2; exit 1; }
log() { echo "[video-bench] $*" >&2; }

SETS=720p ROUNDS=2 PASSES=2 WARMUP=1 CORES=$(nproc) MAX_PIXELS=602112 PEERS=pyav,torchcodec
while [ $# -gt 0 ]; do
  case "$1" in
    --sets) SETS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --passes) PASSES=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --cores) CORES=$2; shift 2 ;;
    --max-pixels) MAX_PIXELS=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
FPS=2 MIN_PIXELS=3136
WORK=.stoker/bench-video
PY=.stoker/model-venv/bin/python
mkdir -p "$WORK" bench/results
command -v taskset >/dev/null || die "taskset (util-linux) is needed to pin the 1-core runs"
command -v java >/dev/null || die "java 17+ is needed"

# --- Stoker: the operators module and its test classpath -----------------------------------------
CP_FILE=$PWD/operators/target/test-classpath.txt
if [ ! -f operators/target/test-classes/dev/stoker/operators/video/VideoPreprocessBench.class ] \
    || [ ! -f "$CP_FILE" ] \
    || [ -n "$(find operators/src -newer "$CP_FILE" -name '*.java' -print -quit)" ]; then
  log "building the operators module (mvn -o package -DskipTests)"
  mvn -o -q -B -pl operators -am package -DskipTests \
    || die "the offline Maven build failed (run it online once: mvn -B -pl operators -am package -DskipTests)"
  mvn -o -q -B -pl operators dependency:build-classpath -Dmdep.includeScope=test \
    -Dmdep.outputFile="$CP_FILE" || die "could not write the operators test classpath"
fi
CP="operators/target/test-classes:operators/target/classes:$(cat "$CP_FILE")"
grep -q "org/bytedeco/ffmpeg" <<<"$CP" || die "FFmpeg (org.bytedeco:ffmpeg) is not on the operators test classpath"
JAVA_OPTS=(-Xms4g -Xmx4g -XX:+UseParallelGC
  "-Dlog4j.configurationFile=file:$PWD/operators/src/test/resources/log4j2-test.properties")
JAVA=(java "${JAVA_OPTS[@]}" -cp "$CP" dev.stoker.operators.video.VideoPreprocessBench)

# --- the peer: the model venv, torchcodec ---------------------------------------------------------
if [ ! -x "$PY" ]; then
  log "creating the model venv .stoker/model-venv (python/requirements-model.txt, ~5.8 GB, minutes)"
  python3.11 -m venv .stoker/model-venv || die "python3.11 is needed for the model venv"
  { .stoker/model-venv/bin/pip install -q --disable-pip-version-check -r python/requirements-model.txt \
      && .stoker/model-venv/bin/pip install -q --disable-pip-version-check --no-deps -e python; } \
    || die "could not create the model venv (pip install -r python/requirements-model.txt)"
  touch .stoker/model-venv/.installed
fi
"$PY" -c "import av, torch, transformers; assert transformers.__version__ == '5.23.0'" \
  || die "the model venv lacks PyAV/torch/transformers 5.23.0 (python/requirements-model.txt)"
PYPATH=$PWD/python
LD_EXTRA=""
if [[ ",$PEERS," == *",torchcodec,"* ]]; then
  PYDEPS=$WORK/pydeps
  if [ ! -f "$PYDEPS/.installed" ] || [ bench/video-requirements.txt -nt "$PYDEPS/.installed" ]; then
    log "installing torchcodec into $PYDEPS (bench/video-requirements.txt)"
    rm -rf "$PYDEPS"
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$PYDEPS" \
      -r bench/video-requirements.txt || die "pip could not install bench/video-requirements.txt"
    touch "$PYDEPS/.installed"
  fi
  # torchcodec loads FFmpeg's shared libraries by their sonames (libavcodec.so.62, ...); PyAV's
  # wheel bundles FFmpeg 8 under hashed names (av.libs/libavcodec-<hash>.so.62.x, which find their
  # own dependencies beside them): link every av.libs file, and the sonames to the FFmpeg ones.
  AVLIBS=$("$PY" -c "import av, pathlib; print(pathlib.Path(av.__file__).parent.parent / 'av.libs')")
  FFLIBS=$WORK/ffmpeg-libs
  rm -rf "$FFLIBS"; mkdir -p "$FFLIBS"
  for f in "$AVLIBS"/*; do
    b=$(basename "$f")
    ln -s "$f" "$FFLIBS/$b"
    case "$b" in
      libav*.so.*|libsw*.so.*) ln -s "$f" "$FFLIBS/${b%%-*}.so.$(sed -E 's/.*\.so\.([0-9]+).*/\1/' <<<"$b")" ;;
    esac
  done
  PYPATH=$PYPATH:$PWD/$PYDEPS
  LD_EXTRA=$PWD/$FFLIBS
  LD_LIBRARY_PATH=$LD_EXTRA PYTHONPATH=$PYPATH "$PY" -c \
      "import torchcodec; assert torchcodec.ffmpeg_major_version == 8, torchcodec.ffmpeg_major_version" \
    || die "torchcodec does not load with PyAV's FFmpeg ($FFLIBS); run with --peers pyav to skip it"
fi
pyrun() { LD_LIBRARY_PATH=${LD_EXTRA}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONPATH=$PYPATH "$@"; }

# --- clips -------------------------------------------------------------------------------------------
[ -d ../shared/data ] || die "../shared/data (the shared photos the clips pan over) is missing"
IFS=, read -r -a SET_LIST <<<"$SETS"
IFS=, read -r -a PEER_LIST <<<"$PEERS"
pyrun "$PY" bench/video_preprocess.py clips ../shared/data "$WORK/clips" "${SET_LIST[@]}"

# --- the runs -----------------------------------------------------------------------------------------
OUT=$WORK/results.txt
: > "$OUT"
stoker() { # round set workers
  local pin=(); [ "$3" = 1 ] && pin=(taskset -c 0)
  "${pin[@]}" "${JAVA[@]}" run "$WORK/clips/$2" "$FPS" "$MIN_PIXELS" "$MAX_PIXELS" "$3" "$WARMUP" "$PASSES" \
    | grep '^RESULT' | sed "s/^RESULT {/RESULT {\"round\": $1, /" | tee -a "$OUT"
}
peer() { # round set workers backend
  local pin=(); [ "$3" = 1 ] && pin=(taskset -c 0)
  pyrun "${pin[@]}" "$PY" bench/video_preprocess.py peer "$WORK/clips/$2" "$4" "$FPS" "$MIN_PIXELS" \
    "$MAX_PIXELS" "$3" "$WARMUP" "$PASSES" "$1" 2> >(grep -v -i "warn" >&2) | tee -a "$OUT"
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "settings: sets $SETS, rounds $ROUNDS, passes $PASSES, warm-up $WARMUP video(s) per worker, cores $CORES, fps $FPS, min/max pixels $MIN_PIXELS/$MAX_PIXELS, peers $PEERS; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for set in "${SET_LIST[@]}"; do
  for round in $(seq 1 "$ROUNDS"); do
    for workers in 1 "$CORES"; do
      if [ $((round % 2)) = 1 ]; then
        stoker "$round" "$set" "$workers"
        for p in "${PEER_LIST[@]}"; do peer "$round" "$set" "$workers" "$p"; done
      else
        for p in "${PEER_LIST[@]}"; do peer "$round" "$set" "$workers" "$p"; done
        stoker "$round" "$set" "$workers"
      fi
    done
  done
  # one clip's pixel_values_videos, Stoker's against each peer's
  clip=$(find "$WORK/clips/$set" -name '*.mp4' | sort | head -1)
  "${JAVA[@]}" dump "$clip" "$FPS" "$MIN_PIXELS" "$MAX_PIXELS" "$WORK/stoker-$set.f32" | grep '^DUMP'
  for p in "${PEER_LIST[@]}"; do
    pyrun "$PY" bench/video_preprocess.py compare "$clip" "$p" "$FPS" "$MIN_PIXELS" "$MAX_PIXELS" \
      "$WORK/stoker-$set.f32" 0 2> >(grep -v -i "warn" >&2) | tee -a "$OUT"
  done
  rm -f "$WORK/stoker-$set.f32"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
log "load after: $LOAD_AFTER"
SETTINGS=$(printf '{"fps": %s, "min_frames": 4, "max_frames": 768, "min_pixels": %s, "max_pixels": %s, "rounds": %s, "passes": %s, "warmup_videos_per_worker": %s, "cores": %s, "peers": "%s", "torchcodec": "%s", "java": "%s", "load_average_before": "%s", "load_average_after": "%s"}' \
  "$FPS" "$MIN_PIXELS" "$MAX_PIXELS" "$ROUNDS" "$PASSES" "$WARMUP" "$CORES" "$PEERS" \
  "$(grep -v '^#' bench/video-requirements.txt | grep . | head -1)" "$(java -version 2>&1 | head -1 | tr -d '"')" "$LOAD_BEFORE" "$LOAD_AFTER")
"$PY" bench/video_preprocess.py report "$OUT" "$WORK/clips" bench/results/video-preprocess.json \
  bench/results/video-preprocess.md "$SETTINGS"
