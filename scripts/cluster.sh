#!/usr/bin/env bash
# A standalone Flink session cluster on this machine, built from Maven artifacts (no flink-dist):
# one JobManager and N TaskManagers, each its own JVM, started the way Flink's own scripts start
# them (memory flags from Flink's BashJavaUtils, the JVM options of env.java.default-opts.all).
#
#   scripts/cluster.sh build                      assemble the Flink home (cluster/target/flink: lib/, plugins/)
#   scripts/cluster.sh start [-D key=value ...]   start a JobManager and $STOKER_TASKMANAGERS (2) TaskManagers
#   scripts/cluster.sh start --ha [-D ...]        high availability: a ZooKeeper server, then a leader and a
#                                                 standby JobManager ($STOKER_JOBMANAGERS, 2) and the TaskManagers
#   scripts/cluster.sh status                     processes and the REST API's cluster overview
#   scripts/cluster.sh add-taskmanager [-D key=value ...]
#                                                 start one more TaskManager; with -D options it gets
#                                                 its own config dir (the cluster's plus those), e.g.
#                                                 the external resources of an edge TaskManager
#   scripts/cluster.sh kill-taskmanager N         SIGKILL TaskManager N (a node failure)
#   scripts/cluster.sh add-jobmanager [-D ...]    (--ha) start one more standby JobManager
#   scripts/cluster.sh kill-jobmanager N          (--ha) SIGKILL JobManager N (1 is the first one started)
#   scripts/cluster.sh leader                     (--ha) the leading JobManager: "N REST-PORT"
#   scripts/cluster.sh stop                       stop every process of the cluster (SIGTERM, then SIGKILL)
#   scripts/cluster.sh flink ARGS...              Flink's CLI (`flink run`, savepoint, stop, cancel, list, ...)
#   scripts/cluster.sh conf                       print the effective configuration
#
# Configuration: flink-conf/config.yaml (the production settings, each commented), with these
# overrides for a single machine, then any `-D key=value` given to `start`:
#   checkpoints and savepoints in $STOKER_CLUSTER_DIR/{checkpoints,savepoints} (instead of s3://),
#   rest.port=$STOKER_REST_PORT (8081), jobmanager.rpc.port=$STOKER_JM_RPC_PORT (6123),
#   metrics.reporters=jmx (the Prometheus reporter listens on all interfaces), smaller memory.
#   high-availability.type=NONE without --ha (config.yaml names a ZooKeeper ensemble).
# $STOKER_TASKMANAGERS=0 starts only the JobManager (then add TaskManagers one by one).
# Everything of a cluster (conf/, log/, pid/, checkpoints/, savepoints/) lives in
# $STOKER_CLUSTER_DIR (default .stoker/cluster), so two clusters with different directories and
# ports can run side by side.
# Addresses: every process binds $STOKER_CLUSTER_ADDRESS (default 127.0.0.1) only, and this
# script's own REST calls go there. `start` writes it into the cluster's configuration
# (jobmanager.rpc.address, jobmanager.bind-host, rest.address, rest.bind-address,
# taskmanager.host, taskmanager.bind-host); later commands read it from there. A TaskManager on
# another host (a simulated node of scripts/nodes.sh) is started on that host with its own
# address, the cluster directory being shared (all simulated nodes see this file system):
#   STOKER_CLUSTER_ADDRESS=10.77.0.1 scripts/nodes.sh exec cpu0 scripts/cluster.sh start
#   scripts/nodes.sh exec gpu0 scripts/cluster.sh add-taskmanager \
#     -D taskmanager.host=10.77.0.3 -D taskmanager.bind-host=10.77.0.3 [-D ...]
# Processes outlive the command that started them (setsid). `stop` and `kill-taskmanager` work
# from the host or any node (by process id: the nodes share the machine's processes); `flink`,
# `status` and `add-*` must run where the JobManager's address is reachable (for simulated nodes:
# inside a node, e.g. scripts/nodes.sh exec cpu0 scripts/cluster.sh flink run ...).
# With --ha: ZooKeeper (cluster/zookeeper, jars from Maven Central) on that address, port
# $STOKER_ZK_PORT (2181), data in $STOKER_CLUSTER_DIR/zookeeper, Flink's HA metadata in
# $STOKER_CLUSTER_DIR/ha; JobManager N (N >= 2) serves REST on $STOKER_REST_PORT + N - 1 unless
# -D rest.port=... says.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
FLINK_HOME=${STOKER_FLINK_HOME:-$REPO/cluster/target/flink}
RUN=${STOKER_CLUSTER_DIR:-$REPO/.stoker/cluster}
REST_PORT=${STOKER_REST_PORT:-8081}
RPC_PORT=${STOKER_JM_RPC_PORT:-6123}
ADDRESS=${STOKER_CLUSTER_ADDRESS:-127.0.0.1}
[[ $ADDRESS =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || { echo "[cluster] error: STOKER_CLUSTER_ADDRESS '$ADDRESS': an IPv4 address" >&2; exit 1; }
CONF=$RUN/conf
LOG=$RUN/log
PIDS=$RUN/pid

log() { printf '\033[1m[cluster]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cmd_build() {
  local stamp=$FLINK_HOME/.assembled
  if [ -f "$stamp" ] && [ -z "$(find "$REPO/cluster/pom.xml" -newer "$stamp")" ]; then return; fi
  command -v mvn >/dev/null || die "Maven is needed to assemble the Flink home"
  log "assembling the Flink home from Maven artifacts in $FLINK_HOME (mvn -pl cluster package)"
  mkdir -p "$REPO/.stoker/logs"
  mvn -B -q -f "$REPO/cluster/pom.xml" package > "$REPO/.stoker/logs/cluster-build.log" 2>&1 \
    || { tail -n 30 "$REPO/.stoker/logs/cluster-build.log" >&2; die "building the Flink home failed"; }
  touch "$stamp"
}

# lib/ also holds libjpeg-turbo's Java API (turbojpeg-2.1.5.jar, from third_party/maven via cluster/pom.xml):
# a JNI library loads in one class loader per JVM, so it must come from the parent class loader, never
# from the job jar. The native part is libturbojpeg.so (apt-get install libturbojpeg0-dev, which ./stoker
# does as root); without it the job decodes JPEGs with ImageIO.
classpath() { echo "$FLINK_HOME/lib/*"; }

# Lines a BashJavaUtils command prints after its result marker.
bash_java_utils() {
  java -cp "$(classpath)" org.apache.flink.runtime.util.bash.BashJavaUtils "$@" 2>/dev/null \
    | sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p'
}

# A value of the effective (flattened) configuration, as Flink's config.sh reads it.
conf_value() {
  sed -n "s/^$1: //p" "$CONF/effective.yaml" | head -1 | sed "s/^'\(.*\)'$/\1/"
}

# update_conf DIR -D key=value ...: DIR/config.yaml with those keys set, flattened as Flink reads it.
update_conf() {
  local dir=$1 yaml; shift
  yaml=$(bash_java_utils UPDATE_AND_GET_FLINK_CONFIGURATION --configDir "$dir" "$@" -flatten)
  [ -n "$yaml" ] || die "Flink could not read $dir/config.yaml (run: java -cp '$(classpath)' org.apache.flink.runtime.util.bash.BashJavaUtils UPDATE_AND_GET_FLINK_CONFIGURATION --configDir $dir)"
  { echo "# Generated by scripts/cluster.sh from flink-conf/config.yaml plus its overrides; do not edit."
    echo "$yaml" | sort; } > "$dir/config.yaml.new"
  mv "$dir/config.yaml.new" "$dir/config.yaml"
}

write_conf() {
  mkdir -p "$CONF" "$LOG" "$PIDS" "$RUN/checkpoints" "$RUN/savepoints" "$RUN/tmp"
  cp "$REPO/flink-conf/config.yaml" "$CONF/config.yaml"
  cp "$REPO/flink-conf/log4j-cluster.properties" "$CONF/log4j.properties"
  cp "$REPO/flink-conf/log4j-cli.properties" "$CONF/log4j-cli.properties"
  local overrides=(
    -D "execution.checkpointing.dir=file://$RUN/checkpoints"
    -D "execution.checkpointing.savepoint-dir=file://$RUN/savepoints"
    -D "rest.port=$REST_PORT"
    -D "jobmanager.rpc.address=$ADDRESS"
    -D "jobmanager.bind-host=$ADDRESS"
    -D "rest.address=$ADDRESS"
    -D "rest.bind-address=$ADDRESS"
    -D "taskmanager.host=$ADDRESS"
    -D "taskmanager.bind-host=$ADDRESS"
    -D "jobmanager.rpc.port=$RPC_PORT"
    -D "metrics.reporters=jmx"
    -D "jobmanager.memory.process.size=1024m"
    -D "taskmanager.memory.process.size=2g"
    -D "taskmanager.memory.network.min=128mb"
    -D "io.tmp.dirs=$RUN/tmp"
    "${HA_OVERRIDES[@]}"
    "$@"
  )
  update_conf "$CONF" "${overrides[@]}"
  cp "$CONF/config.yaml" "$CONF/effective.yaml"
}

jvm_opts() { conf_value env.java.default-opts.all; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && grep -qa -- "$RUN" "/proc/$(cat "$1")/cmdline" 2>/dev/null; }

# Starts a Flink process in its own session (it outlives this shell), logs in $LOG/<name>.{log,out}.
# Its FLINK_CONF_DIR is $SPAWN_CONF (default $CONF).
spawn() {
  local name=$1; shift
  (
    cd "$RUN"
    export FLINK_CONF_DIR=${SPAWN_CONF:-$CONF} FLINK_PLUGINS_DIR=$FLINK_HOME/plugins FLINK_LIB_DIR=$FLINK_HOME/lib
    export AWS_EC2_METADATA_DISABLED=${AWS_EC2_METADATA_DISABLED:-true}
    # shellcheck disable=SC2046
    exec setsid java -Dlog.file="$LOG/$name.log" -Dlog4j.configurationFile="file:$CONF/log4j.properties" \
      -Dstoker.cluster.dir="$RUN" "$@" < /dev/null > "$LOG/$name.out" 2>&1
  ) &
  echo $! > "$PIDS/$name.pid"
}

# The JobManager's address: the cluster's configuration's once `start` wrote it.
jm_address() {
  if [ -f "$CONF/effective.yaml" ]; then conf_value rest.address; else echo "$ADDRESS"; fi
}

# The REST API of the cluster: the leading JobManager's with --ha (any JobManager's REST endpoint
# answers for the leader, but a killed one answers nothing).
rest() {
  local port=$REST_PORT
  if ha_on; then port=$(ha_leader | cut -d' ' -f2); [ -n "$port" ] || return 1; fi
  curl -sf --max-time 5 "http://$(jm_address):$port$1"
}

# JobManager N's process name: "jobmanager" for the first (as without --ha), "jobmanager-N" after.
jm_name() { if [ "$1" = 1 ]; then echo jobmanager; else echo "jobmanager-$1"; fi; }

# start_jobmanager [N [-D key=value ...]]: JobManager N (default 1); with options it reads its own
# config dir $RUN/conf-jobmanager-N (the cluster's config with those keys set: a standby's REST
# port; the entrypoint's own -D options did not override rest.port of config.yaml).
start_jobmanager() {
  local i=${1:-1} params conf=$CONF; shift || true
  if [ $# -gt 0 ]; then
    conf=$RUN/conf-jobmanager-$i
    rm -rf "$conf"; cp -r "$CONF" "$conf"
    update_conf "$conf" "$@"
  fi
  mapfile -t params < <(bash_java_utils GET_JM_RESOURCE_PARAMS --configDir "$conf")
  [ ${#params[@]} -ge 1 ] || die "BashJavaUtils GET_JM_RESOURCE_PARAMS failed"
  # shellcheck disable=SC2086
  SPAWN_CONF=$conf spawn "$(jm_name "$i")" ${params[0]} $(jvm_opts) -cp "$(classpath)" \
    org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint \
    --configDir "$conf" --executionMode cluster ${params[1]:-}
}

next_tm_index() {
  local i=1
  while [ -e "$PIDS/taskmanager-$i.pid" ] || [ -e "$LOG/taskmanager-$i.log" ]; do i=$((i + 1)); done
  echo "$i"
}

# start_taskmanager [-D key=value ...]: with options, the TaskManager reads its own config dir
# $RUN/conf-taskmanager-N (the cluster's config with those keys set).
start_taskmanager() {
  local i params conf=$CONF
  i=$(next_tm_index)
  if [ $# -gt 0 ]; then
    conf=$RUN/conf-taskmanager-$i
    rm -rf "$conf"; cp -r "$CONF" "$conf"
    update_conf "$conf" "$@"
  fi
  mapfile -t params < <(bash_java_utils GET_TM_RESOURCE_PARAMS --configDir "$conf")
  [ ${#params[@]} -ge 2 ] || die "BashJavaUtils GET_TM_RESOURCE_PARAMS failed"
  # shellcheck disable=SC2086
  SPAWN_CONF=$conf spawn "taskmanager-$i" ${params[0]} $(jvm_opts) -cp "$(classpath)" \
    org.apache.flink.runtime.taskexecutor.TaskManagerRunner --configDir "$conf" ${params[1]} \
    -D "taskmanager.resource-id=taskmanager-$i"
  echo "$i"
}

registered_taskmanagers() {
  rest /taskmanagers 2>/dev/null | grep -o '"id":"taskmanager-[0-9]*"' | sort -u | wc -l || true
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2 t=0; shift 2
  until "$@"; do
    t=$((t + 1))
    [ $t -le $((limit * 4)) ] || die "$what did not happen within ${limit}s; logs in $LOG"
    sleep 0.25
  done
}

tm_registered() { rest /taskmanagers 2>/dev/null | grep -q "\"id\":\"taskmanager-$1\""; }
jm_up() {
  if ha_on; then jobmanagers_alive || die "no JobManager is running; see $LOG/jobmanager*.log and .out"
  else alive "$PIDS/jobmanager.pid" || die "the JobManager exited; see $LOG/jobmanager.log and .out"; fi
  rest /overview >/dev/null 2>&1
}

cmd_start() {
  local ha=0
  if [ "${1:-}" = --ha ]; then ha=1; shift; fi
  cmd_build
  command -v curl >/dev/null || die "curl is needed to talk to the REST API"
  if alive "$PIDS/jobmanager.pid" || alive "$PIDS/zookeeper.pid"; then die "a cluster is already running in $RUN (scripts/cluster.sh stop first)"; fi
  if curl -sf --max-time 5 "http://$ADDRESS:$REST_PORT/overview" >/dev/null 2>&1; then die "something already answers on $ADDRESS:$REST_PORT (set STOKER_REST_PORT)"; fi
  rm -rf "$PIDS" "$LOG"
  if [ $ha = 1 ]; then
    mkdir -p "$PIDS" "$LOG"
    build_zookeeper
    start_zookeeper
    ha_overrides
  fi
  write_conf "$@"
  local n=${STOKER_TASKMANAGERS:-2} i started=()
  log "starting a JobManager (web UI http://$ADDRESS:$REST_PORT) and $n TaskManagers; run directory $RUN"
  start_jobmanager
  if [ $ha = 1 ]; then
    for ((i = 2; i <= ${STOKER_JOBMANAGERS:-2}; i++)); do
      start_jobmanager "$i" -D "rest.port=$((REST_PORT + i - 1))"
      log "standby JobManager $i: web UI http://$ADDRESS:$((REST_PORT + i - 1))"
    done
  fi
  for ((i = 0; i < n; i++)); do started+=("$(start_taskmanager)"); done
  wait_for 120 "the JobManager's REST API answering" jm_up
  for i in "${started[@]}"; do wait_for 120 "TaskManager $i registering" tm_registered "$i"; done
  log "cluster up: $(registered_taskmanagers) TaskManagers; submit with: scripts/cluster.sh flink run job/target/stoker-job.jar ..."
}

cmd_add_taskmanager() {
  if ha_on; then jobmanagers_alive || die "no cluster is running in $RUN"
  else alive "$PIDS/jobmanager.pid" || die "no cluster is running in $RUN"; fi
  local i
  i=$(start_taskmanager "$@")
  wait_for 120 "TaskManager $i registering" tm_registered "$i"
  log "TaskManager $i registered"
  echo "$i"
}

cmd_kill_taskmanager() {
  local i=${1:?usage: kill-taskmanager N}
  alive "$PIDS/taskmanager-$i.pid" || die "TaskManager $i is not running"
  kill -KILL "$(cat "$PIDS/taskmanager-$i.pid")"
  mv "$PIDS/taskmanager-$i.pid" "$PIDS/taskmanager-$i.killed"
  log "TaskManager $i killed (SIGKILL)"
}

stop_process() {
  local pidfile=$1 pid t
  alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  for ((t = 0; t < 60; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  if kill -0 "$pid" 2>/dev/null; then log "$(basename "$pidfile" .pid) ignored SIGTERM for 15s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$pidfile"
}

cmd_stop() {
  [ -d "$PIDS" ] || { log "no cluster in $RUN"; return 0; }
  local f
  for f in "$PIDS"/taskmanager-*.pid; do [ -e "$f" ] && stop_process "$f"; done
  for f in "$PIDS"/jobmanager*.pid; do [ -e "$f" ] && stop_process "$f"; done
  [ -e "$PIDS/zookeeper.pid" ] && stop_process "$PIDS/zookeeper.pid"
  log "cluster in $RUN stopped"
}

cmd_status() {
  local f any=0
  for f in "$PIDS"/*.pid; do
    [ -e "$f" ] || continue
    any=1
    if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"; else echo "$(basename "$f" .pid): not running"; fi
  done
  [ $any = 1 ] || { echo "no cluster in $RUN"; return 1; }
  if ha_on; then echo "leading JobManager (N REST-port): $(ha_leader || echo none)"; fi
  echo "REST /overview: $(rest /overview || echo unreachable)"
}

cmd_flink() {
  [ -f "$CONF/config.yaml" ] || die "no cluster configuration in $CONF (scripts/cluster.sh start first)"
  export FLINK_CONF_DIR=$CONF FLINK_PLUGINS_DIR=$FLINK_HOME/plugins FLINK_LIB_DIR=$FLINK_HOME/lib
  export AWS_EC2_METADATA_DISABLED=${AWS_EC2_METADATA_DISABLED:-true}
  # shellcheck disable=SC2046
  exec java $(jvm_opts) -Dlog.file="$LOG/flink-client.log" -Dlog4j.configurationFile="file:$CONF/log4j-cli.properties" \
    -cp "$(classpath)" org.apache.flink.client.cli.CliFrontend "$@"
}

# --- High availability: a ZooKeeper server and standby JobManagers (start --ha) ---------------
# Flink's ZooKeeper HA: the JobManagers elect a leader in ZooKeeper; the leader keeps the
# submitted job graphs and the completed checkpoints' pointers there, their data in
# high-availability.storageDir. A standby JobManager that wins the election after the leader died
# recovers every job from there and restores its latest checkpoint; the TaskManagers and the CLI
# find the leader in ZooKeeper too. The production settings are in flink-conf/config.yaml.
ZK_HOME=${STOKER_ZOOKEEPER_HOME:-$REPO/cluster/zookeeper/target/zookeeper}
ZK_PORT=${STOKER_ZK_PORT:-2181}
# without --ha: one JobManager and no ZooKeeper, whatever flink-conf/config.yaml says
HA_OVERRIDES=(-D "high-availability.type=NONE")

ha_on() { [ -f "$CONF/effective.yaml" ] && [ "$(conf_value high-availability.type)" = zookeeper ]; }

# The ZooKeeper server's jars (cluster/zookeeper/pom.xml: org.apache.zookeeper:zookeeper).
build_zookeeper() {
  local stamp=$ZK_HOME/.assembled
  if [ -f "$stamp" ] && [ -z "$(find "$REPO/cluster/zookeeper/pom.xml" -newer "$stamp")" ]; then return; fi
  command -v mvn >/dev/null || die "Maven is needed to fetch ZooKeeper"
  log "fetching the ZooKeeper server into $ZK_HOME (mvn -f cluster/zookeeper/pom.xml package)"
  mkdir -p "$REPO/.stoker/logs"
  mvn -B -q -f "$REPO/cluster/zookeeper/pom.xml" package > "$REPO/.stoker/logs/zookeeper-build.log" 2>&1 \
    || { tail -n 30 "$REPO/.stoker/logs/zookeeper-build.log" >&2; die "fetching ZooKeeper failed"; }
  touch "$stamp"
}

# ZooKeeper serves requests: its "srvr" command reports the server's mode (while it is still
# loading, or after a failed start, it says it is "not currently serving requests").
zk_up() {
  alive "$PIDS/zookeeper.pid" || die "ZooKeeper exited; see $LOG/zookeeper.log and .out"
  local reply
  { exec 3<>"/dev/tcp/$ADDRESS/$ZK_PORT"; } 2>/dev/null || return 1
  printf srvr >&3
  reply=$(timeout 2 cat <&3 || true)
  exec 3>&-
  [[ "$reply" == *"Mode: standalone"* ]]
}

# One standalone ZooKeeper server on $ADDRESS:$ZK_PORT (a production ensemble has 3 or 5 on
# separate hosts); its data (snapshots, transaction log) in $RUN/zookeeper.
start_zookeeper() {
  if (exec 3<>"/dev/tcp/$ADDRESS/$ZK_PORT") 2>/dev/null; then die "something already listens on $ADDRESS:$ZK_PORT (set STOKER_ZK_PORT)"; fi
  mkdir -p "$RUN/zookeeper/data"
  cat > "$RUN/zookeeper/zoo.cfg" <<EOF
# Generated by scripts/cluster.sh start --ha.
tickTime=2000
dataDir=$RUN/zookeeper/data
clientPort=$ZK_PORT
clientPortAddress=$ADDRESS
# no AdminServer (an HTTP listener on 8080); the four-letter "srvr" tells that the server is up
admin.enableServer=false
4lw.commands.whitelist=srvr,stat
# keep the last snapshots only (ZooKeeper's default keeps every one forever)
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
EOF
  (
    cd "$RUN"
    exec setsid java -Xmx256m -cp "$ZK_HOME/lib/*" -Dzookeeper.log.file="$LOG/zookeeper.log" \
      -Dlogback.configurationFile="$REPO/cluster/zookeeper/logback.xml" -Dstoker.cluster.dir="$RUN" \
      org.apache.zookeeper.server.ZooKeeperServerMain "$RUN/zookeeper/zoo.cfg" < /dev/null > "$LOG/zookeeper.out" 2>&1
  ) &
  echo $! > "$PIDS/zookeeper.pid"
  wait_for 60 "ZooKeeper answering on $ADDRESS:$ZK_PORT" zk_up
  log "ZooKeeper up on $ADDRESS:$ZK_PORT"
}

# The keys that point the cluster at that ZooKeeper and keep the HA metadata on the local disk.
ha_overrides() {
  mkdir -p "$RUN/ha"
  HA_OVERRIDES=(
    -D "high-availability.type=zookeeper"
    -D "high-availability.zookeeper.quorum=$ADDRESS:$ZK_PORT"
    -D "high-availability.storageDir=file://$RUN/ha"
    # the local server has no SASL; without this every ZooKeeper connection logs "Authentication failed"
    -D "zookeeper.sasl.disable=true"
  )
}

jobmanagers_alive() {
  local f
  for f in "$PIDS"/jobmanager*.pid; do alive "$f" && return 0; done
  return 1
}

# "N REST-PORT" of the leading JobManager: the live JobManager whose REST endpoint was granted
# leadership last (each one logs it). Every REST endpoint answers for the leader, so this is
# the one to ask after the others were killed.
ha_leader() {
  local f name port best='' best_t=''
  for f in "$PIDS"/jobmanager*.pid; do
    alive "$f" || continue
    name=$(basename "$f" .pid)
    line=$(grep -a 'was granted leadership with leaderSessionID' "$LOG/$name.log" 2>/dev/null | grep -a 'http://' | tail -1) || continue
    [ -n "$line" ] || continue
    port=$(echo "$line" | sed -n 's|.*http://[^:]*:\([0-9]*\) was granted.*|\1|p')
    if [ -z "$best_t" ] || [[ "${line:0:23}" > "$best_t" ]]; then
      best_t=${line:0:23}; best="${name#jobmanager-} $port"
      [ "$name" = jobmanager ] && best="1 $port"
    fi
  done
  [ -n "$best" ] && echo "$best"
}

cmd_add_jobmanager() {
  ha_on || die "standby JobManagers need high availability (scripts/cluster.sh start --ha)"
  local i=2
  while [ -e "$PIDS/jobmanager-$i.pid" ] || [ -e "$LOG/jobmanager-$i.log" ]; do i=$((i + 1)); done
  if [[ " $* " == *" rest.port="* ]]; then start_jobmanager "$i" "$@"
  else start_jobmanager "$i" -D "rest.port=$((REST_PORT + i - 1))" "$@"; fi
  log "standby JobManager $i started"
  echo "$i"
}

cmd_kill_jobmanager() {
  local i=${1:?usage: kill-jobmanager N} name
  name=$(jm_name "$i")
  alive "$PIDS/$name.pid" || die "JobManager $i is not running"
  kill -KILL "$(cat "$PIDS/$name.pid")"
  mv "$PIDS/$name.pid" "$PIDS/$name.killed"
  log "JobManager $i killed (SIGKILL)"
}

case "${1:-}" in
  build) cmd_build ;;
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  add-taskmanager) shift; cmd_add_taskmanager "$@" ;;
  kill-taskmanager) shift; cmd_kill_taskmanager "$@" ;;
  add-jobmanager) shift; cmd_add_jobmanager "$@" ;;
  kill-jobmanager) shift; cmd_kill_jobmanager "$@" ;;
  leader) ha_on || die "the cluster in $RUN runs without --ha"; ha_leader || die "no JobManager leads"; ;;
  flink) shift; cmd_flink "$@" ;;
  conf) cat "$CONF/config.yaml" ;;
  *) sed -n '2,48p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
