#!/usr/bin/env bash
# Runs a real single-node Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1.
#
#   scripts/kafka.sh start|stop|status|restart|logs
#
# Environment:
#   KAFKA_PORT      listener port (default 9092); the controller listens on KAFKA_PORT+1000
#   KAFKA_VERSION   Apache Kafka version fetched from Maven Central (default 4.1.1; 3.9.x works)
#   KAFKA_HOME      an unpacked Apache Kafka distribution to use instead of fetching jars
#   KAFKA_CACHE     where fetched jars live (default ~/.cache/snowsource/kafka-$KAFKA_VERSION)
#   KAFKA_DATA      state directory: storage, pid and log (default .kafka/$KAFKA_PORT in the repo)
#
# Why jars from Maven Central: this project must run where only package registries are reachable,
# so we assemble the broker's classpath with `mvn dependency:copy-dependencies` once and cache it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_DATA="${KAFKA_DATA:-$here/.kafka/$KAFKA_PORT}"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/scripts/lib.sh"
kafka_defaults

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
classpath() { kafka_classpath; }
is_running() { kafka_is_running; }
probe() { kafka_probe; }

start() {
  if is_running; then
    local pid
    pid="$(cat "$PIDFILE")"
    # Our broker may still be starting (another `start` launched it): give it the usual time.
    wait_ready "$pid"
    log "already running on 127.0.0.1:$KAFKA_PORT (pid $pid)"
    return 0
  fi
  rm -f "$PIDFILE"
  # A broker that cannot bind its port dies, but the probe would then be answered by whatever
  # holds the port: refuse before starting anything.
  require_free "$KAFKA_PORT"
  require_free "$CONTROLLER_PORT"
  local cp
  cp="$(classpath)"
  mkdir -p "$KAFKA_DATA"
  cat >"$KAFKA_DATA/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DATA/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.cleaner.backoff.ms=1000
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
  local java_opts=(-Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true
    "-Dkafka.logs.dir=$KAFKA_DATA" "-Dlog4j.configuration=file:$KAFKA_DATA/log4j.properties"
    "-Dlog4j2.configurationFile=$KAFKA_DATA/log4j2.properties")
  if [[ ! -f "$KAFKA_DATA/data/meta.properties" ]]; then
    java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool format \
      -t "$(cluster_id)" \
      -c "$KAFKA_DATA/server.properties" >"$KAFKA_DATA/format.log" 2>&1 \
      || { log "formatting storage failed:"; cat "$KAFKA_DATA/format.log" >&2; exit 1; }
  fi
  log "starting Apache Kafka on 127.0.0.1:$KAFKA_PORT (data in $KAFKA_DATA)"
  nohup java "${java_opts[@]}" -cp "$cp" kafka.Kafka "$KAFKA_DATA/server.properties" \
    >"$KAFKA_DATA/stdout.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  wait_ready "$(cat "$PIDFILE")"
  log "ready on 127.0.0.1:$KAFKA_PORT (pid $(cat "$PIDFILE"))"
}

# Waits until process $1 answers a metadata request on KAFKA_PORT *and* is the process that
# listens there (an answer from anything else is not our broker); fails otherwise.
wait_ready() {
  local pid="$1" waited=0
  until probe && owns_port "$KAFKA_PORT" "$pid"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "broker exited during start-up; last log lines:"
      tail -n 30 "$LOGFILE" "$KAFKA_DATA/stdout.log" >&2 2>/dev/null || true
      require_free "$KAFKA_PORT"
      require_free "$CONTROLLER_PORT"
      exit 1
    fi
    if ((waited >= START_TIMEOUT * 4)); then
      require_free "$KAFKA_PORT" "$pid"
      log "broker did not answer a metadata request within ${START_TIMEOUT}s; see $LOGFILE"
      exit 1
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
}

stop() { stop_process broker; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status)
    if is_running && probe && owns_port "$KAFKA_PORT" "$(cat "$PIDFILE")"; then
      echo "running on 127.0.0.1:$KAFKA_PORT (pid $(cat "$PIDFILE"))"
    else echo "not running"; exit 1; fi ;;
  logs) tail -n "${2:-50}" "$LOGFILE" ;;
  wipe) stop; rm -rf "$KAFKA_DATA" ;;
  *) echo "usage: $0 start|stop|restart|status|logs [N]|wipe" >&2; exit 2 ;;
esac
