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
#   APICURIO_CONVERTER_VERSION  Apicurio's Avro converter on the plugin path (default 2.6.13.Final;
#                    `none` leaves it out): connectors may set
#                    value.converter=io.apicurio.registry.utils.converter.AvroConverter to read
#                    Schema Registry (Confluent-framed) records, as the Avro tests do
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
APICURIO_CONVERTER_VERSION="${APICURIO_CONVERTER_VERSION:-2.6.13.Final}"
# Its own cache: a plugin directory Connect loads in an isolated class loader. (Confluent's
# AvroConverter is not on Maven Central; Apicurio's 2.x converter and its dependencies are, and
# with apicurio.registry.as-confluent=true it reads Confluent's framing.)
PLUGIN_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/snowsource/connect-apicurio-converter-$APICURIO_CONVERTER_VERSION"
PIDFILE="$CONNECT_DATA/connect.pid"
LOGFILE="$CONNECT_DATA/connect.log"
START_TIMEOUT="${CONNECT_START_TIMEOUT:-120}"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/scripts/lib.sh"

log() { printf 'connect.sh: %s\n' "$*" >&2; }

classpath() {
  if [[ ! -f "$CONNECT_CACHE/.complete" ]]; then
    command -v mvn >/dev/null || { log "mvn not found: install Maven to fetch the Connect jars"; exit 1; }
    log "fetching Kafka Connect $KAFKA_VERSION from Maven Central into $CONNECT_CACHE (once)"
    maven_fetch "$CONNECT_CACHE" kafka-connect \
      "$(maven_dependency org.apache.kafka connect-runtime "$KAFKA_VERSION")
$(maven_dependency org.apache.kafka connect-json "$KAFKA_VERSION")
$(maven_dependency org.apache.kafka connect-file "$KAFKA_VERSION")
$(maven_dependency org.apache.logging.log4j log4j-slf4j-impl 2.24.3)"
  fi
  echo "$CONNECT_CACHE/libs/*"
}

# The plugin path line of worker.properties (empty without the converter), fetched once.
plugin_path() {
  [[ "$APICURIO_CONVERTER_VERSION" == none ]] && return 0
  if [[ ! -f "$PLUGIN_CACHE/.complete" ]]; then
    command -v mvn >/dev/null || { log "mvn not found: install Maven to fetch the Apicurio converter"; exit 1; }
    log "fetching Apicurio's Avro converter $APICURIO_CONVERTER_VERSION (about 26 MB) into $PLUGIN_CACHE (once)"
    maven_fetch "$PLUGIN_CACHE" apicurio-converter \
      "$(maven_dependency io.apicurio apicurio-registry-utils-converter "$APICURIO_CONVERTER_VERSION")"
  fi
  echo "plugin.path=$PLUGIN_CACHE"
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
  local cp plugins
  cp="$(classpath)"
  plugins="$(plugin_path)"
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
$plugins
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
  wait_started worker "$CONNECT_DATA/stdout.log" "worker REST did not answer"
  log "ready on http://127.0.0.1:$CONNECT_PORT (pid $(cat "$PIDFILE"))"
}

stop() { stop_process worker; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  fetch) classpath >/dev/null; plugin_path >/dev/null ;;
  status)
    if is_running && probe; then echo "running on http://127.0.0.1:$CONNECT_PORT (pid $(cat "$PIDFILE"))"
    else echo "not running"; exit 1; fi ;;
  logs) tail -n "${2:-50}" "$LOGFILE" ;;
  wipe) stop; rm -rf "$CONNECT_DATA" ;;
  *) echo "usage: $0 start|stop|restart|status|logs [N]|wipe|fetch" >&2; exit 2 ;;
esac
