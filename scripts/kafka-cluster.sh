#!/usr/bin/env bash
# Runs a real three-node Apache Kafka cluster (KRaft, each node broker+controller) on 127.0.0.1,
# replicated as production is: replication factor 3, min.insync.replicas 2, and the offsets and
# transaction-state topics replicated 3 / min ISR 2. For the cluster fault tests (make
# test-cluster) and for trying snowsource against broker failures by hand; `make demo` and
# `make test` use the single broker of scripts/kafka.sh.
#
#   scripts/kafka-cluster.sh start|stop|status|wipe|bootstrap|controller
#   scripts/kafka-cluster.sh kill|restart|pause|resume|pid N      (N = node 1, 2 or 3)
#
#   kill N     SIGKILL node N (a crash: no controlled shutdown); `restart N` starts it again
#   pause N    SIGSTOP node N (a stall: its sockets stay open, nothing answers); `resume N` SIGCONT
#   controller prints the node id of the active KRaft controller (the quorum leader)
#
# Environment:
#   KAFKA_PORT      node 1's listener port (default 9192); node N listens on KAFKA_PORT+N-1 and
#                   its controller on that port + 1000
#   KAFKA_VERSION   Apache Kafka version (as scripts/kafka.sh)
#   KAFKA_HOME      an unpacked Apache Kafka distribution to use instead of fetching jars
#   KAFKA_DATA      state directory of the cluster (default .kafka/cluster-$KAFKA_PORT in the
#                   repo); node N keeps its storage, pid and log in KAFKA_DATA/nodeN
#   KAFKA_HEAP      each node's maximum heap (default 384m: three nodes share a small machine)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_PORT="${KAFKA_PORT:-9192}"
CLUSTER_DATA="${KAFKA_DATA:-$here/.kafka/cluster-$BASE_PORT}"
KAFKA_HEAP="${KAFKA_HEAP:-384m}"
NODES=(1 2 3)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/scripts/lib.sh"

log() { printf 'kafka-cluster.sh: %s\n' "$*" >&2; }
is_running() { kafka_is_running; }

# node N: point KAFKA_PORT, CONTROLLER_PORT, KAFKA_DATA, PIDFILE and LOGFILE at node N.
node() {
  local n="$1"
  [[ "$n" =~ ^[123]$ ]] || { log "no node '$n' (nodes are 1, 2 and 3)"; exit 2; }
  KAFKA_PORT=$((BASE_PORT + n - 1))
  KAFKA_DATA="$CLUSTER_DATA/node$n"
  kafka_defaults
}

voters() {
  local n out=""
  for n in "${NODES[@]}"; do out+="${out:+,}$n@127.0.0.1:$((BASE_PORT + n - 1 + 1000))"; done
  echo "$out"
}

bootstrap() {
  local n out=""
  for n in "${NODES[@]}"; do out+="${out:+,}127.0.0.1:$((BASE_PORT + n - 1))"; done
  echo "$out"
}

write_config() {
  local n="$1"
  mkdir -p "$KAFKA_DATA"
  cat >"$KAFKA_DATA/server.properties" <<PROPS
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$(voters)
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DATA/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=5
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.cleaner.backoff.ms=1000
num.network.threads=2
num.io.threads=2
background.threads=2
PROPS
  cat >"$KAFKA_DATA/log4j.properties" <<'L4J'
log4j.rootLogger=WARN, file
log4j.logger.kafka.server.KafkaServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
L4J
  cat >"$KAFKA_DATA/log4j2.properties" <<'L4J2'
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.server.name = kafka.server
logger.server.level = INFO
L4J2
}

java_opts() {
  # Serial GC and C1 only: three JVMs on two shared cores start faster and steal less CPU.
  echo "-Xms96m -Xmx$KAFKA_HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true" \
    "-Dkafka.logs.dir=$KAFKA_DATA -Dlog4j.configuration=file:$KAFKA_DATA/log4j.properties" \
    "-Dlog4j2.configurationFile=$KAFKA_DATA/log4j2.properties"
}

# launch N CP: start node N's process (formatting its storage the first time); no waiting.
launch() {
  local n="$1" cp="$2" opts
  node "$n"
  if is_running; then return 0; fi
  rm -f "$PIDFILE"
  require_free "$KAFKA_PORT"
  require_free "$CONTROLLER_PORT"
  write_config "$n"
  # shellcheck disable=SC2207
  opts=($(java_opts))
  if [[ ! -f "$KAFKA_DATA/data/meta.properties" ]]; then
    java "${opts[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$(cat "$CLUSTER_DATA/cluster.id")" \
      -c "$KAFKA_DATA/server.properties" >"$KAFKA_DATA/format.log" 2>&1 \
      || { log "formatting node $n's storage failed:"; cat "$KAFKA_DATA/format.log" >&2; exit 1; }
  fi
  nohup java "${opts[@]}" -cp "$cp" kafka.Kafka "$KAFKA_DATA/server.properties" \
    >"$KAFKA_DATA/stdout.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
}

# await N [MIN]: wait until node N answers a metadata request listing at least MIN brokers.
await() {
  local n="$1" need="${2:-1}" waited=0 pid
  node "$n"
  pid="$(cat "$PIDFILE")"
  until kafka_probe "$need" && owns_port "$KAFKA_PORT" "$pid"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "node $n exited during start-up; last log lines:"
      tail -n 30 "$LOGFILE" "$KAFKA_DATA/stdout.log" >&2 2>/dev/null || true
      exit 1
    fi
    if ((waited >= START_TIMEOUT * 4)); then
      log "node $n did not list $need live brokers within ${START_TIMEOUT}s; see $LOGFILE"
      exit 1
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
}

start() {
  local cp n
  node 1
  cp="$(kafka_classpath)"
  mkdir -p "$CLUSTER_DATA"
  [[ -f "$CLUSTER_DATA/cluster.id" ]] || cluster_id >"$CLUSTER_DATA/cluster.id"
  log "starting a 3-node Kafka cluster on $(bootstrap) (data in $CLUSTER_DATA)"
  # All nodes at once: a controller quorum of three elects a leader only once two are up.
  for n in "${NODES[@]}"; do launch "$n" "$cp"; done
  for n in "${NODES[@]}"; do await "$n" 3; done
  log "ready on $(bootstrap)"
}

restart_node() {
  local n="$1" cp
  node "$n"
  cp="$(kafka_classpath)"
  launch "$n" "$cp"
  await "$n"
  log "node $n running on 127.0.0.1:$KAFKA_PORT (pid $(cat "$PIDFILE"))"
}

signal_node() {
  local n="$1" sig="$2"
  node "$n"
  is_running || { log "node $n is not running"; exit 1; }
  kill "-$sig" "$(cat "$PIDFILE")"
  if [[ "$sig" == KILL ]]; then
    # Gone for good: wait until the kernel has released its ports, so `restart` can bind them.
    local pid
    pid="$(cat "$PIDFILE")"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$PIDFILE"
  fi
}

# Stops every node at once (SIGTERM, SIGKILL after 30 s): one by one, the last node would wait
# for a quorum that its peers' shutdown already took away.
stop() {
  local n pids=()
  for n in "${NODES[@]}"; do
    node "$n"
    if is_running; then
      kill -CONT "$(cat "$PIDFILE")" 2>/dev/null || true
      kill -TERM "$(cat "$PIDFILE")" 2>/dev/null || true
      pids+=("$(cat "$PIDFILE")")
    fi
    rm -f "$PIDFILE"
  done
  local pid
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  log "stopped"
}

status() {
  local n state all=0
  for n in "${NODES[@]}"; do
    node "$n"
    if ! is_running; then
      state="down"
      all=1
    elif [[ "$(ps -o stat= -p "$(cat "$PIDFILE")")" == T* ]]; then
      state="paused (pid $(cat "$PIDFILE"))"
    elif kafka_probe; then
      state="running (pid $(cat "$PIDFILE"))"
    else
      state="not answering (pid $(cat "$PIDFILE"))"
      all=1
    fi
    echo "node $n on 127.0.0.1:$KAFKA_PORT: $state"
  done
  return "$all"
}

# The active controller: the quorum leader with the highest epoch that any node recorded.
controller() {
  python3 - "$CLUSTER_DATA" <<'PY'
import glob, json, sys
best = None
for path in glob.glob(f"{sys.argv[1]}/node*/data/__cluster_metadata-0/quorum-state"):
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        continue
    if state.get("leaderId", -1) >= 0 and (best is None or state["leaderEpoch"] > best[0]):
        best = (state["leaderEpoch"], state["leaderId"])
if best is None:
    sys.exit("no node has recorded a quorum leader")
print(best[1])
PY
}

need_node() { [[ -n "${1:-}" ]] || { echo "usage: $0 $2 N" >&2; exit 2; }; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  bootstrap) bootstrap ;;
  controller) controller ;;
  kill) need_node "${2:-}" kill; signal_node "$2" KILL ;;
  pause) need_node "${2:-}" pause; signal_node "$2" STOP ;;
  resume) need_node "${2:-}" resume; signal_node "$2" CONT ;;
  restart) need_node "${2:-}" restart; restart_node "$2" ;;
  pid) need_node "${2:-}" pid; node "$2"; is_running && cat "$PIDFILE" ;;
  wipe) stop; rm -rf "$CLUSTER_DATA" ;;
  *)
    echo "usage: $0 start|stop|status|wipe|bootstrap|controller|kill N|restart N|pause N|resume N|pid N" >&2
    exit 2 ;;
esac
