# shellcheck shell=bash
# Helpers shared by kafka.sh, kafka-cluster.sh, kafka-secure.sh and connect.sh: sourced, never run.
#
# The sourcing script defines log() (its own message prefix), PIDFILE, LOGFILE, START_TIMEOUT
# and the probe() that says its process is ready; is_running() is the one below unless it
# defines its own after sourcing this file (kafka_is_running() for a broker).

# --------------------------------------------------------------------------------- jars (Maven)

# maven_fetch CACHE ARTIFACT DEPENDENCIES: assemble the runtime classpath of DEPENDENCIES (the
# <dependency> elements of a pom) into CACHE/libs with `mvn dependency:copy-dependencies`, and
# mark CACHE complete. Only package registries are reachable where this project is built, so
# jars come from Maven Central, once, and later starts use the cache.
maven_fetch() {
  local cache="$1" artifact="$2" dependencies="$3" work
  work="$(mktemp -d)"
  cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.snowsource</groupId><artifactId>$artifact</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
$dependencies
  </dependencies>
</project>
POM
  rm -rf "$cache"
  mkdir -p "$cache/libs"
  mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$cache/libs" >&2
  rm -rf "$work"
  touch "$cache/.complete"
}

# maven_dependency GROUP ARTIFACT VERSION: one <dependency> element for maven_fetch.
maven_dependency() {
  printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n' \
    "$1" "$2" "$3"
}

# -------------------------------------------------------------------------------- the process

# The pid file's process is alive.
is_running() {
  [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

# wait_started WHAT STDOUT_LOG SILENCE: poll probe() every 0.25 s until it answers. Exits 1 with
# the last log lines when the process dies first, or "SILENCE within START_TIMEOUT" after it.
wait_started() {
  local what="$1" stdout_log="$2" silence="$3" waited=0
  until probe; do
    if ! is_running; then
      log "$what exited during start-up; last log lines:"
      tail -n 30 "$LOGFILE" "$stdout_log" >&2 2>/dev/null || true
      exit 1
    fi
    if ((waited >= START_TIMEOUT * 4)); then
      log "$silence within ${START_TIMEOUT}s; see $LOGFILE"
      exit 1
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
}

# stop_process WHAT: SIGTERM the pid file's process, SIGKILL it after 30 s; forget the pid file.
stop_process() {
  local what="$1"
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
  log "$what did not stop in 30s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

# ------------------------------------------------------------------------------------- ports

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
    log "port $port is in use by another process$who; stop it, or pick another port with ${PORT_HINT:-KAFKA_PORT=<port> (the controller uses KAFKA_PORT+1000)}"
    exit 1
  fi
}

# ------------------------------------------------------------------- an Apache Kafka broker

# kafka_defaults: the settings of a broker listening (in plaintext) on KAFKA_PORT with its state
# in KAFKA_DATA, both set by the caller. The broker scripts read what this sets.
# shellcheck disable=SC2034
kafka_defaults() {
  KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
  # The suffix changes whenever the assembled classpath does, so an old cache is never reused.
  KAFKA_CACHE="${KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/snowsource/kafka-$KAFKA_VERSION-r2}"
  CONTROLLER_PORT=$((KAFKA_PORT + 1000))
  PIDFILE="$KAFKA_DATA/kafka.pid"
  LOGFILE="$KAFKA_DATA/server.log"
  START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
}

# The broker's classpath: KAFKA_HOME's jars, or jars fetched from Maven Central once.
kafka_classpath() {
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
    local logging
    # The broker logs through SLF4J: Kafka 4 ships log4j2, Kafka 3 reload4j (log4j 1).
    if [[ "$KAFKA_VERSION" == 3.* ]]; then
      logging="$(maven_dependency org.slf4j slf4j-reload4j 1.7.36)"
    else
      logging="$(maven_dependency org.apache.logging.log4j log4j-slf4j-impl 2.24.3)"
    fi
    maven_fetch "$KAFKA_CACHE" kafka-broker \
      "$(maven_dependency org.apache.kafka kafka_2.13 "$KAFKA_VERSION")
$logging"
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
kafka_is_running() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  kill -0 "$pid" 2>/dev/null && ps -o args= -p "$pid" 2>/dev/null | grep -qF "$KAFKA_DATA/server.properties"
}

# Answers 0 once the broker on KAFKA_PORT returns a Metadata response listing at least $1 brokers
# (default 1; a cluster is whole when every node is listed).
kafka_probe() {
  python3 - "$KAFKA_PORT" "${1:-1}" <<'PY'
import socket, struct, sys
port = int(sys.argv[1])
need = int(sys.argv[2])
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
    sys.exit(0 if brokers >= need else 1)
except OSError:
    sys.exit(1)
PY
}
