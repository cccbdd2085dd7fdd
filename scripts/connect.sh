#!/usr/bin/env bash
# Runs a real Apache Kafka Connect worker (standalone mode) against a local broker, with the
# FileStream connectors and the JsonConverter on its classpath. Tests use it to prove that what
# snowsource writes is readable by Connect itself; it starts with no connector, and connectors
# are created through its REST API (POST /connectors).
#
#   scripts/connect.sh start|stop|status|restart|logs [N]|wipe|fetch
#
# Environment:
#   KAFKA_PORT       the broker to use, on 127.0.0.1 (default 9092)
#   KAFKA_BOOTSTRAP  another broker's bootstrap address instead (default 127.0.0.1:KAFKA_PORT)
#   CONNECT_PORT     the worker's REST port (default KAFKA_PORT+2000)
#   KAFKA_VERSION    Apache Kafka version fetched from Maven Central (default 4.1.1)
#   CONNECT_CACHE    where fetched jars live (default ~/.cache/snowsource/connect-$KAFKA_VERSION)
#   CONNECT_DATA     state directory: config, offsets, pid and log (default .kafka/connect-$CONNECT_PORT)
#   CONNECT_HEAP     maximum JVM heap (default 256m)
#
# Like scripts/kafka.sh, the classpath is assembled once with `mvn dependency:copy-dependencies`
# (only package registries are reachable where this project is built) and cached.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_BOOTSTRAP="${KAFKA_BOOTSTRAP:-127.0.0.1:$KAFKA_PORT}"
CONNECT_PORT="${CONNECT_PORT:-$((KAFKA_PORT + 2000))}"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
# The suffix changes whenever the assembled classpath does, so an old cache is never reused.
CONNECT_CACHE="${CONNECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/snowsource/connect-$KAFKA_VERSION-r1}"
CONNECT_DATA="${CONNECT_DATA:-$here/.kafka/connect-$CONNECT_PORT}"
CONNECT_HEAP="${CONNECT_HEAP:-256m}"
PIDFILE="$CONNECT_DATA/connect.pid"
LOGFILE="$CONNECT_DATA/connect.log"
START_TIMEOUT="${CONNECT_START_TIMEOUT:-120}"

log() { printf 'connect.sh: %s\n' "$*" >&2; }

classpath() {
  if [[ ! -f "$CONNECT_CACHE/.complete" ]]; then
    command -v mvn >/dev/null || { log "mvn not found: install Maven to fetch the Connect jars"; exit 1; }
    log "fetching Kafka Connect $KAFKA_VERSION from Maven Central into $CONNECT_CACHE (once)"
    local work
    work="$(mktemp -d)"
    cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.snowsource</groupId><artifactId>kafka-connect</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-file</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
    rm -rf "$CONNECT_CACHE"
    mkdir -p "$CONNECT_CACHE/libs"
    mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$CONNECT_CACHE/libs" >&2
    rm -rf "$work"
    touch "$CONNECT_CACHE/.complete"
  fi
  echo "$CONNECT_CACHE/libs/*"
}

is_running() {
  [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

# Answers 0 once the worker's REST API answers GET / (it does so only after the herder started).
probe() {
  python3 - "$CONNECT_PORT" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=2) as resp:
        sys.exit(0 if "version" in json.load(resp) else 1)
except (OSError, ValueError):
    sys.exit(1)
PY
}

start() {
  if is_running && probe; then
    log "already running on 127.0.0.1:$CONNECT_PORT (pid $(cat "$PIDFILE"))"
    return 0
  fi
  local cp
  cp="$(classpath)"
  mkdir -p "$CONNECT_DATA"
  cat >"$CONNECT_DATA/worker.properties" <<PROPS
bootstrap.servers=$KAFKA_BOOTSTRAP
listeners=http://127.0.0.1:$CONNECT_PORT
offset.storage.file.filename=$CONNECT_DATA/offsets
offset.flush.interval.ms=1000
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=true
# The FileStream connectors are on the classpath; scanning it only costs start-up time.
plugin.discovery=only_scan
PROPS
  cat >"$CONNECT_DATA/log4j2.properties" <<'L4J2'
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:connect.logs.dir}/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.runtime.name = org.apache.kafka.connect.runtime
logger.runtime.level = INFO
L4J2
  # A small heap and the C1 compiler only: a test worker moves a handful of records, and start-up
  # time matters more than peak throughput.
  local java_opts=("-Xms64m" "-Xmx$CONNECT_HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    -Djava.awt.headless=true "-Dconnect.logs.dir=$CONNECT_DATA"
    "-Dlog4j2.configurationFile=$CONNECT_DATA/log4j2.properties")
  log "starting Kafka Connect (standalone) on 127.0.0.1:$CONNECT_PORT for broker $KAFKA_BOOTSTRAP"
  nohup java "${java_opts[@]}" -cp "$cp" org.apache.kafka.connect.cli.ConnectStandalone \
    "$CONNECT_DATA/worker.properties" >"$CONNECT_DATA/stdout.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local waited=0
  until probe; do
    if ! is_running; then
      log "worker exited during start-up; last log lines:"
      tail -n 30 "$LOGFILE" "$CONNECT_DATA/stdout.log" >&2 2>/dev/null || true
      exit 1
    fi
    if ((waited >= START_TIMEOUT * 4)); then
      log "worker REST did not answer within ${START_TIMEOUT}s; see $LOGFILE"
      exit 1
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
  log "ready on http://127.0.0.1:$CONNECT_PORT (pid $(cat "$PIDFILE"))"
}

stop() {
  if ! is_running; then
    log "not running"
    rm -f "$PIDFILE"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  kill -TERM "$pid"
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; return 0; }
    sleep 0.25
  done
  log "worker did not stop in 30s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  fetch) classpath >/dev/null ;;
  status)
    if is_running && probe; then echo "running on http://127.0.0.1:$CONNECT_PORT (pid $(cat "$PIDFILE"))"
    else echo "not running"; exit 1; fi ;;
  logs) tail -n "${2:-50}" "$LOGFILE" ;;
  wipe) stop; rm -rf "$CONNECT_DATA" ;;
  *) echo "usage: $0 start|stop|restart|status|logs [N]|wipe|fetch" >&2; exit 2 ;;
esac
