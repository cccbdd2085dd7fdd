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
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
# The suffix changes whenever the assembled classpath does, so an old cache is never reused.
KAFKA_CACHE="${KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/snowsource/kafka-$KAFKA_VERSION-r2}"
KAFKA_DATA="${KAFKA_DATA:-$here/.kafka/$KAFKA_PORT}"
CONTROLLER_PORT=$((KAFKA_PORT + 1000))
PIDFILE="$KAFKA_DATA/kafka.pid"
LOGFILE="$KAFKA_DATA/server.log"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }

classpath() {
  if [[ -n "${KAFKA_HOME:-}" ]]; then
    [[ -d "$KAFKA_HOME/libs" ]] || { log "KAFKA_HOME=$KAFKA_HOME has no libs/ directory"; exit 1; }
    echo "$KAFKA_HOME/libs/*"
    return
  fi
  if [[ ! -f "$KAFKA_CACHE/.complete" ]]; then
    log "first run: fetching Apache Kafka $KAFKA_VERSION (about 45 jars, 45 MB) from Maven Central"
    log "into $KAFKA_CACHE with Maven. This happens once; it usually takes 1-3 minutes and"
    log "Maven shows no progress meanwhile (a Maven that has never run also fetches its plugins)."
    command -v mvn >/dev/null || { log "mvn not found: install Maven or set KAFKA_HOME"; exit 1; }
    local work logging
    work="$(mktemp -d)"
    # The broker logs through SLF4J: Kafka 4 ships log4j2, Kafka 3 reload4j (log4j 1).
    if [[ "$KAFKA_VERSION" == 3.* ]]; then
      logging='<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>'
    else
      logging='<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>'
    fi
    cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.snowsource</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    $logging
  </dependencies>
</project>
POM
    rm -rf "$KAFKA_CACHE"
    mkdir -p "$KAFKA_CACHE/libs"
    mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$KAFKA_CACHE/libs" >&2
    rm -rf "$work"
    touch "$KAFKA_CACHE/.complete"
    log "fetched; later starts use the cache"
  fi
  echo "$KAFKA_CACHE/libs/*"
}

# A KRaft cluster id: 16 random bytes, URL-safe base64. Never starting with "-", which the
# storage tool's argument parser would take for an option.
cluster_id() {
  python3 -c '
import base64, uuid
while True:
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not cid.startswith("-"):
        print(cid)
        break
'
}

# Our broker: the pid file's process is alive and is the broker of this data directory (a pid
# reused by an unrelated process after a reboot does not count).
is_running() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  kill -0 "$pid" 2>/dev/null && ps -o args= -p "$pid" 2>/dev/null | grep -qF "$KAFKA_DATA/server.properties"
}

# The pids listening on TCP port $1, one per line; "?" for a listener whose process we may not
# look at (another user's). Linux reads /proc; elsewhere lsof answers.
listeners() {
  python3 - "$1" <<'PY'
import os, subprocess, sys
port = int(sys.argv[1])
inodes = set()
tables = [t for t in ("/proc/net/tcp", "/proc/net/tcp6") if os.path.exists(t)]
if not tables:
    try:
        out = subprocess.run(["lsof", "-nP", f"-iTCP:{port}", "-sTCP:LISTEN", "-t"],
                             capture_output=True, text=True, check=False).stdout
    except OSError:
        sys.exit(0)
    print("\n".join(sorted(set(out.split()))))
    sys.exit(0)
for table in tables:
    with open(table) as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
owners = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                owners.add(pid)
        except OSError:
            pass
found = sorted(owners)
if inodes and not owners:
    found = ["?"]
print("\n".join(found))
PY
}

# 0 when process $2 is the one listening on port $1.
owns_port() {
  listeners "$1" | grep -qx "$2"
}

# Fails naming the port when something other than process $2 (if given) listens on port $1.
require_free() {
  local port="$1" ours="${2:-}" others
  others="$(listeners "$port" | grep -vx "${ours:-none}" | tr '\n' ' ' || true)"
  if [[ -n "${others// /}" ]]; then
    local who=""
    [[ "$others" != "? " ]] && who=" (pid ${others% })"
    log "port $port is in use by another process$who; stop it, or pick another port with KAFKA_PORT=<port> (the controller uses KAFKA_PORT+1000)"
    exit 1
  fi
}

# Answers 0 once the broker returns a Metadata response that lists at least one broker.
probe() {
  python3 - "$KAFKA_PORT" <<'PY'
import socket, struct, sys
port = int(sys.argv[1])
client = b"kafka.sh"
# Metadata v1 request: api_key 3, version 1, correlation 1, client id, topics = null (all)
body = struct.pack(">hhih", 3, 1, 1, len(client)) + client + struct.pack(">i", -1)
try:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = s.recv(4)
        if len(head) < 4:
            sys.exit(1)
        size = struct.unpack(">i", head)[0]
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            if not chunk:
                sys.exit(1)
            data += chunk
    brokers = struct.unpack(">i", data[4:8])[0]
    sys.exit(0 if brokers >= 1 else 1)
except OSError:
    sys.exit(1)
PY
}

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
  log "broker did not stop in 30s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

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
