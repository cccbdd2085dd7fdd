#!/usr/bin/env bash
# A second local Apache Kafka broker with security switched on, beside the one of kafka.sh:
#
#   scripts/kafka-secure.sh start|stop|status|logs|wipe
#
# Listeners (all on 127.0.0.1):
#   KAFKA_SECURE_PORT      SASL_SSL: SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN
#   KAFKA_SECURE_PORT+1    SSL with client certificates required (mTLS)
#   KAFKA_SECURE_PORT+2    PLAINTEXT, broker-internal (and this script's readiness probe)
#   KAFKA_SECURE_PORT+1002 controller
# Users, all with password $KAFKA_SASL_PASSWORD: scram512 (SCRAM-SHA-512), scram256
# (SCRAM-SHA-256), created in the metadata log when the storage is formatted; plain (PLAIN).
#
# Certificates live in KAFKA_TLS_DIR and are generated with openssl when missing: ca.pem (the CA
# clients trust), broker.pem/broker-key.pem (for IP 127.0.0.1 only, so "localhost" is a host name
# mismatch), client.pem/client-key.pem (an mTLS client). Tests point KAFKA_TLS_DIR at a fresh
# directory, so every test run makes its own.
#
# Environment: KAFKA_SECURE_PORT (default 9392), KAFKA_SASL_PASSWORD (default
# snowsource-secret), KAFKA_TLS_DIR (default $KAFKA_DATA/tls), KAFKA_DATA (default
# .kafka/secure-$KAFKA_SECURE_PORT), and KAFKA_VERSION / KAFKA_HOME / KAFKA_CACHE as for kafka.sh,
# whose jar cache and broker helpers (scripts/lib.sh) this script shares.
set -euo pipefail

secure_here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_SECURE_PORT="${KAFKA_SECURE_PORT:-9392}"
MTLS_PORT=$((KAFKA_SECURE_PORT + 1))
# The broker helpers speak to KAFKA_PORT in plaintext: here that is the internal listener.
export KAFKA_PORT=$((KAFKA_SECURE_PORT + 2))
export KAFKA_DATA="${KAFKA_DATA:-$secure_here/.kafka/secure-$KAFKA_SECURE_PORT}"
KAFKA_SASL_PASSWORD="${KAFKA_SASL_PASSWORD:-snowsource-secret}"
KAFKA_TLS_DIR="${KAFKA_TLS_DIR:-$KAFKA_DATA/tls}"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$secure_here/scripts/lib.sh"
kafka_defaults

log() { printf 'kafka-secure.sh: %s\n' "$*" >&2; }
classpath() { kafka_classpath; }
is_running() { kafka_is_running; }
probe() { kafka_probe; }
stop() { stop_process broker; }

if [[ ! "$KAFKA_SASL_PASSWORD" =~ ^[A-Za-z0-9._-]+$ ]]; then
  log "KAFKA_SASL_PASSWORD may only hold A-Z a-z 0-9 . _ - (it is written into JAAS and SCRAM specs)"
  exit 2
fi

make_certs() {
  local d="$KAFKA_TLS_DIR"
  [[ -f "$d/ca.pem" && -f "$d/broker-keystore.pem" && -f "$d/client.pem" ]] && return 0
  command -v openssl >/dev/null || { log "openssl not found: it makes the test certificates"; exit 1; }
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=snowsource-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$d/ca-key.pem" -out "$d/ca.pem" 2>/dev/null
  local name san usage
  for name in broker client; do
    if [[ $name == broker ]]; then san="IP:127.0.0.1"; usage=serverAuth; else san="DNS:client"; usage=clientAuth; fi
    printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$san" "$usage" >"$d/$name.ext"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" \
      -keyout "$d/$name-key.pem" -out "$d/$name.csr" 2>/dev/null
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" \
      -CAcreateserial -days 2 -extfile "$d/$name.ext" -out "$d/$name.pem" 2>/dev/null
  done
  # Kafka's PEM key store: the (unencrypted PKCS#8) key followed by the certificate chain.
  cat "$d/broker-key.pem" "$d/broker.pem" "$d/ca.pem" >"$d/broker-keystore.pem"
  log "generated test certificates in $d"
}

secure_start() {
  if is_running && probe; then
    log "already running: SASL_SSL 127.0.0.1:$KAFKA_SECURE_PORT, mTLS 127.0.0.1:$MTLS_PORT"
    return 0
  fi
  local cp
  cp="$(classpath)"
  mkdir -p "$KAFKA_DATA"
  make_certs
  local pw="$KAFKA_SASL_PASSWORD" tls="$KAFKA_TLS_DIR"
  cat >"$KAFKA_DATA/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT,MTLS://127.0.0.1:$MTLS_PORT,INTERNAL://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT,MTLS://127.0.0.1:$MTLS_PORT,INTERNAL://127.0.0.1:$KAFKA_PORT
listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
controller.listener.names=CONTROLLER
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_plain="$pw";
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
listener.name.mtls.ssl.client.auth=required
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
    "-Dkafka.logs.dir=$KAFKA_DATA" "-Dlog4j2.configurationFile=$KAFKA_DATA/log4j2.properties")
  if [[ ! -f "$KAFKA_DATA/data/meta.properties" ]]; then
    java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool format \
      -t "$(cluster_id)" -c "$KAFKA_DATA/server.properties" \
      --add-scram "SCRAM-SHA-512=[name=scram512,password=$pw]" \
      --add-scram "SCRAM-SHA-256=[name=scram256,password=$pw]" \
      >"$KAFKA_DATA/format.log" 2>&1 \
      || { log "formatting storage failed:"; cat "$KAFKA_DATA/format.log" >&2; exit 1; }
  fi
  log "starting secured Apache Kafka: SASL_SSL 127.0.0.1:$KAFKA_SECURE_PORT, mTLS 127.0.0.1:$MTLS_PORT"
  nohup java "${java_opts[@]}" -cp "$cp" kafka.Kafka "$KAFKA_DATA/server.properties" \
    >"$KAFKA_DATA/stdout.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  wait_started broker "$KAFKA_DATA/stdout.log" "broker did not answer"
  log "ready (pid $(cat "$PIDFILE")); CA for clients: $KAFKA_TLS_DIR/ca.pem"
}

case "${1:-}" in
  start) secure_start ;;
  stop) stop ;;
  status)
    if is_running && probe; then echo "running: SASL_SSL 127.0.0.1:$KAFKA_SECURE_PORT, mTLS 127.0.0.1:$MTLS_PORT (pid $(cat "$PIDFILE"))"
    else echo "not running"; exit 1; fi ;;
  logs) tail -n "${2:-50}" "$LOGFILE" ;;
  wipe) stop; rm -rf "$KAFKA_DATA" ;;
  *) echo "usage: $0 start|stop|status|logs [N]|wipe" >&2; exit 2 ;;
esac
