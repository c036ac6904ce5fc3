#!/usr/bin/env bash
# Run one throwaway Apache Cassandra 5.0 node on 127.0.0.1:9042 for tests,
# or a throwaway cluster of N nodes on 127.0.0.1 … 127.0.0.N.
#
#   scripts/cassandra.sh start    fetch (once), wipe old state, launch, wait for CQL
#   scripts/cassandra.sh stop     SIGTERM, wait up to 60 s, then SIGKILL (the
#                                 cluster's nodes too, if one is recorded in
#                                 this run's cluster directory: see below)
#   scripts/cassandra.sh status   exit 0 and print "running (plain mode)",
#                                 "running (auth mode)" or "running (not
#                                 started from …)" if 9042 answers
#
# Clusters (see "Clusters" below for addresses, data centres and tokens;
# run them in a network namespace, as scripts/cluster-test.sh does, since
# node 1 takes 127.0.0.1:9042 like the single node):
#
#   scripts/cassandra.sh start --nodes N [--dcs D]
#                                 wipe the cluster's state, start node 1
#                                 (the seed), then the others together;
#                                 wait for CQL on each
#   scripts/cassandra.sh kill I   SIGKILL node I (its data stays)
#   scripts/cassandra.sh start-node I
#                                 start node I again with its data, wait
#                                 for its CQL port
#   scripts/cassandra.sh stop --cluster
#                                 stop the cluster's nodes only
#   scripts/cassandra.sh status --cluster
#                                 one line per node; exit 0 if all run
#   scripts/cassandra.sh fetch    only download (once), for a namespace
#                                 without network (make prefetch fetches
#                                 everything the test command needs)
#
# What `stop` stops: the node whose state is in SNAPID_CASSANDRA_DIR and
# the cluster recorded in SNAPID_CLUSTER_DIR, when the two directories
# belong together: both given, or both left to their defaults (one user's
# node and cluster). A node directory given alone
# (SNAPID_CASSANDRA_DIR=... scripts/cassandra.sh stop) pairs with no
# cluster: the default cluster directory is then someone else's (a run
# with the default directories), and its nodes are left alone.
# `stop --cluster` stops the cluster of SNAPID_CLUSTER_DIR (or of the
# default) whatever SNAPID_CASSANDRA_DIR says.
#
# On the 2-core test machine 3 nodes in 2 data centres are ready 20–30 s
# after `start --nodes 3 --dcs 2` when it is idle (node 1 after 6–9 s, the
# other two together 15–20 s later), 40–70 s when it is busy; a killed node
# is back about 9 s after `start-node` (idle), and `stop --cluster` takes
# 10–15 s.
#
# Needs only `java` (OpenJDK 17; 11 also works) and `mvn` with access to Maven
# Central: there is no tarball, no Docker and no Debian package. The server jar
# and its runtime dependencies are fetched once with Maven into a cache outside
# the checkout; the node's state (config, data, logs, pid) lives in another
# directory outside the checkout.
#
# Environment:
#   SNAPID_CASSANDRA_VERSION  cassandra-all version on Maven Central (default 5.0.9)
#   SNAPID_CACHE              download cache            (default ~/.cache/snapid)
#   SNAPID_CASSANDRA_DIR      runtime state             (default ~/.cache/snapid/run)
#   SNAPID_CASSANDRA_TIMEOUT  seconds to wait for CQL   (default 180)
#   SNAPID_CASSANDRA_KEEP=1   keep data from the previous run instead of wiping it
#   SNAPID_CASSANDRA_HEAP     JVM heap, -Xms = -Xmx     (default 1g)
#   SNAPID_CASSANDRA_AUTH=1   require passwords and permissions (superuser
#                             cassandra/cassandra) instead of allowing all
#   SNAPID_CLUSTER_DIR        a cluster's state      (default ~/.cache/snapid/cluster)
#   SNAPID_CLUSTER_HEAP       JVM heap of each cluster node (default 512m)
#   SNAPID_PAXOS_VARIANT      paxos_variant of every node: v1 (Cassandra 5.0's
#                             default, four round trips per LWT) or v2
#                             (CEP-14: two round trips for an uncontended
#                             write, one for a serial read); default v1
#
# TLS: the node accepts plain and TLS connections on the same port; a TLS
# client must present a certificate signed by the test CA. The test CA, a
# client certificate and its key (PEM) are made once with openssl in
# $SNAPID_CASSANDRA_DIR/tls: ca.pem, client.pem, client-key.pem.
set -euo pipefail

VERSION="${SNAPID_CASSANDRA_VERSION:-5.0.9}"
CACHE="${SNAPID_CACHE:-$HOME/.cache/snapid}"
DIST="$CACHE/cassandra-$VERSION"  # generated pom.xml + lib/
LIB="$DIST/lib"
RUN_DIR="${SNAPID_CASSANDRA_DIR:-$HOME/.cache/snapid/run}"
TIMEOUT="${SNAPID_CASSANDRA_TIMEOUT:-180}"
HEAP="${SNAPID_CASSANDRA_HEAP:-1g}"
PAXOS_VARIANT="${SNAPID_PAXOS_VARIANT:-v1}"
case "$PAXOS_VARIANT" in
  v1|v2) ;;
  *) echo "cassandra: SNAPID_PAXOS_VARIANT=$PAXOS_VARIANT: want v1 or v2" >&2; exit 2 ;;
esac

HOST=127.0.0.1
CQL_PORT=9042
STORAGE_PORT=7000
JMX_PORT=7199  # local-only JMX, so NodeTool (in cassandra-all) can attach

# What write_config and launch write for the single node; a cluster node
# (see the cluster section) sets its own.
WHAT="one throwaway test node"
CLUSTER_NAME=snapid-test
INITIAL_TOKEN=-9223372036854775808
SNITCH='SimpleSnitch  # data center "datacenter1", rack "rack1"'
SEEDS="$HOST:$STORAGE_PORT"
# Skips syncing the system keyspaces: fine for a node that is only ever
# stopped cleanly, never for one a test kills (it comes back without the
# schema made before the kill).
EXTRA_JVM=(-Dcassandra.unsafesystem=true)

CONF_DIR="$RUN_DIR/conf"
TLS_DIR="$RUN_DIR/tls"
STORE_PASS=snapid-test  # test key stores only
AUTH="${SNAPID_CASSANDRA_AUTH:-0}"
DATA_DIR="$RUN_DIR/data"
LOG_DIR="$RUN_DIR/logs"
PID_FILE="$RUN_DIR/cassandra.pid"
MODE_FILE="$RUN_DIR/mode"  # "plain" or "auth": how the running node was started
SYSTEM_LOG="$LOG_DIR/system.log"  # written by logback (see write_config)
STDOUT_LOG="$LOG_DIR/stdout.log"  # the JVM's own stdout + stderr
READY_LINE="Starting listening for CQL clients"

log() { echo "cassandra: $*"; }
die() { echo "cassandra: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

# True when something accepts TCP connections on HOST:CQL_PORT.
port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$CQL_PORT" 2>/dev/null
}

# Prints the pid from the pid file if that process is still alive.
live_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(cat "$PID_FILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# The last lines of whichever log exists, on stderr, for failed starts.
dump_logs() {
  local f
  for f in "$SYSTEM_LOG" "$STDOUT_LOG"; do
    if [[ -s "$f" ]]; then
      echo "---- last 60 lines of $f ----" >&2
      tail -n 60 "$f" >&2
    fi
  done
}

check_java() {
  command -v java >/dev/null || die "java not found (need OpenJDK 17)"
  local major
  major="$(java -XshowSettings:properties -version 2>&1 |
    sed -n 's/^ *java.specification.version = //p')"
  case "$major" in
    11 | 17) ;;
    *) die "java $major found; Cassandra 5.0 runs on Java 11 or 17 only" ;;
  esac
}

# ---------------------------------------------------------------------------
# Download (once): cassandra-all and its runtime dependencies into $LIB
# ---------------------------------------------------------------------------

# prefetch_hint says what to do without Maven Central (a network namespace,
# an offline machine): fetch beforehand, where there is network.
prefetch_hint() {
  echo "Without network (a network namespace has none), fetch beforehand where there is network, with the same SNAPID_CACHE: 'make prefetch' (everything the test command needs) or 'bash scripts/cassandra.sh fetch' (Cassandra only); or point SNAPID_CACHE at a cache that holds cassandra-$VERSION/lib."
}

fetch() {
  if [[ -f "$LIB/cassandra-all-$VERSION.jar" ]]; then
    return 0
  fi
  command -v mvn >/dev/null ||
    die "mvn not found: it is needed once to fetch Cassandra $VERSION into SNAPID_CACHE ($CACHE). $(prefetch_hint)"
  log "fetching cassandra-all $VERSION and its dependencies from Maven Central into $LIB (one-time)"
  local started=$SECONDS tmp="$DIST/lib.partial"
  mkdir -p "$DIST"
  rm -rf "$tmp"
  # A throwaway pom whose only dependency is the server; copy-dependencies
  # then copies it and its whole runtime closure into one flat folder.
  cat >"$DIST/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- generated by snapid scripts/cassandra.sh; safe to delete -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>snapid.local</groupId>
  <artifactId>cassandra-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>$VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  # The local Maven repository also lives in the cache, so the download does
  # not depend on (or pollute) ~/.m2.
  mvn -q -B -Dstyle.color=never -f "$DIST/pom.xml" \
    -Dmaven.repo.local="$CACHE/m2" \
    org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" ||
    die "mvn could not fetch cassandra-all $VERSION from Maven Central into SNAPID_CACHE ($CACHE; its jars go to $LIB). $(prefetch_hint)"
  [[ -f "$tmp/cassandra-all-$VERSION.jar" ]] || die "mvn did not produce cassandra-all-$VERSION.jar"
  # Publish atomically: an interrupted download never looks complete.
  rm -rf "$LIB"
  mv "$tmp" "$LIB"
  log "fetched $(find "$LIB" -name '*.jar' | wc -l) jars in $((SECONDS - started)) s"
}

# ---------------------------------------------------------------------------
# TLS material (once): a test CA, the node's key store, a client certificate
# ---------------------------------------------------------------------------
TLS_FILES=(ca.pem client.pem client-key.pem node.p12 trust.p12)

# True when every TLS file is there and not empty.
tls_complete() {
  local f
  for f in "${TLS_FILES[@]}"; do
    [[ -s "$1/$f" ]] || return 1
  done
}

# The node's PKCS12 key store is written by OpenSSL 3 (AES and PBKDF2), which
# Java 17 reads (Java 11 from 11.0.12 on).
make_tls() {
  if tls_complete "$TLS_DIR"; then
    return 0
  fi
  command -v openssl >/dev/null || die "openssl not found (needed once for the test TLS certificates)"
  command -v keytool >/dev/null || die "keytool not found (it comes with OpenJDK)"
  local tmp="$TLS_DIR.partial"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # errexit is off in a subshell on the left of ||, so the status is
  # taken with errexit suspended here and on inside the subshell.
  local rc=0
  set +e
  (
    set -e
    cd "$tmp"
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -days 3650 -subj "/CN=snapid test CA" \
      -keyout ca-key.pem -out ca.pem \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    # $1 = name, $2 = subject, $3 = extensions
    sign() {
      openssl req "${ec[@]}" -subj "$2" -keyout "$1-key.pem" -out "$1.csr"
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
        -days 3650 -out "$1.pem" -extfile "$1.ext"
    }
    sign node "/CN=127.0.0.1" "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
    sign client "/CN=snapid-test-client" "extendedKeyUsage=clientAuth"
    openssl pkcs12 -export -in node.pem -inkey node-key.pem -certfile ca.pem -name node \
      -out node.p12 -passout "pass:$STORE_PASS"
    keytool -importcert -noprompt -alias ca -file ca.pem -keystore trust.p12 \
      -storetype PKCS12 -storepass "$STORE_PASS"
    openssl verify -CAfile ca.pem node.pem client.pem
    rm -f ./*.csr ./*.ext ./*.srl ca-key.pem
  ) >"$tmp.log" 2>&1
  rc=$?
  set -e
  if [[ $rc != 0 ]] || ! tls_complete "$tmp"; then
    cat "$tmp.log" >&2
    die "could not make the test TLS certificates (in $tmp)"
  fi
  rm -f "$tmp.log"
  rm -rf "$TLS_DIR"
  mv "$tmp" "$TLS_DIR"
  log "made the test TLS certificates in $TLS_DIR"
}

# ---------------------------------------------------------------------------
# Configuration: cassandra.yaml and logback.xml under $CONF_DIR
# ---------------------------------------------------------------------------
write_config() {
  local authenticator=AllowAllAuthenticator authorizer=AllowAllAuthorizer
  if [[ "$AUTH" == 1 ]]; then
    authenticator=PasswordAuthenticator
    authorizer=CassandraAuthorizer
  fi
  mkdir -p "$CONF_DIR/triggers" "$DATA_DIR" "$LOG_DIR"
  # Cassandra 5.0 rejects unknown keys, so only 4.1+/5.0-style names are used
  # (durations like "5000ms", sizes like "64MiB").
  cat >"$CONF_DIR/cassandra.yaml" <<EOF
# generated by snapid scripts/cassandra.sh: $WHAT
cluster_name: $CLUSTER_NAME
num_tokens: 1
initial_token: $INITIAL_TOKEN
auto_bootstrap: false
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: $SNITCH

seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$SEEDS"
listen_address: $HOST
rpc_address: $HOST
storage_port: $STORAGE_PORT
native_transport_port: $CQL_PORT
start_native_transport: true
native_transport_allow_older_protocols: true

authenticator: $authenticator
authorizer: $authorizer
role_manager: CassandraRoleManager
network_authorizer: AllowAllNetworkAuthorizer

data_file_directories:
  - $DATA_DIR/data
commitlog_directory: $DATA_DIR/commitlog
hints_directory: $DATA_DIR/hints
saved_caches_directory: $DATA_DIR/saved_caches
cdc_raw_directory: $DATA_DIR/cdc_raw

# Commit log: fsync every 10 s, as a default install does.
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 32MiB

# Small footprint for a 1 GiB heap on a 2-core machine.
concurrent_reads: 4
concurrent_writes: 4
concurrent_counter_writes: 2
concurrent_materialized_view_writes: 2
concurrent_compactors: 1
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
key_cache_size: 8MiB
row_cache_size: 0MiB
counter_cache_size: 0MiB
prepared_statements_cache_size: 8MiB
auto_snapshot: false

# Generous server-side timeouts for a slow, busy CI machine. Lightweight
# transactions time out after write_request_timeout (propose/commit) or
# cas_contention_timeout (Paxos prepare retries). Clients should wait longer
# than these (gocql's default is 11 s).
read_request_timeout: 8000ms
range_request_timeout: 10000ms
write_request_timeout: 8000ms
counter_write_request_timeout: 8000ms
cas_contention_timeout: 3000ms
truncate_request_timeout: 60000ms
request_timeout: 10000ms

# Lightweight transactions: Paxos v1 (the default) or v2 (CEP-14).
paxos_variant: $PAXOS_VARIANT

# Plain and TLS clients on the same port; TLS clients need a certificate
# from the test CA.
client_encryption_options:
  enabled: true
  optional: true
  keystore: $TLS_DIR/node.p12
  keystore_password: $STORE_PASS
  truststore: $TLS_DIR/trust.p12
  truststore_password: $STORE_PASS
  store_type: PKCS12
  require_client_auth: true
EOF

  # The jar ships no logback.xml: INFO and up to system.log, warnings also to
  # stdout (which goes to stdout.log).
  cat >"$CONF_DIR/logback.xml" <<'EOF'
<configuration scan="false">
  <appender name="SYSTEMLOG" class="ch.qos.logback.core.FileAppender">
    <file>${cassandra.logdir}/system.log</file>
    <encoder>
      <pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern>
    </encoder>
  </appender>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <filter class="ch.qos.logback.classic.filter.ThresholdFilter">
      <level>WARN</level>
    </filter>
    <encoder>
      <pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="SYSTEMLOG"/>
    <appender-ref ref="STDOUT"/>
  </root>
  <logger name="org.apache.cassandra" level="INFO"/>
</configuration>
EOF
}

# ---------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------
launch() {
  local jamm
  jamm="$(find "$LIB" -maxdepth 1 -name 'jamm-*.jar' | head -n 1)"
  [[ -n "$jamm" ]] || die "no jamm jar in $LIB"

  local -a jvm=(
    "-Xms$HEAP" "-Xmx$HEAP"
    -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1
    -XX:G1HeapRegionSize=16m -XX:MaxGCPauseMillis=300
    -XX:+ExitOnOutOfMemoryError -XX:+PerfDisableSharedMem
    -ea -da:net.openhft...
    -Djava.net.preferIPv4Stack=true
    -Djdk.attach.allowAttachSelf=true
    -Dio.netty.tryReflectionSetAccessible=true
    -Dio.netty.allocator.useCacheForAllThreads=true
    -Dio.netty.allocator.maxOrder=11
    -Dchronicle.analytics.disable=true
    "-javaagent:$jamm"
  )
  # JPMS: what conf/jvm17-server.options of Cassandra 5.0 grants.
  local m
  for m in java.base/jdk.internal.misc java.management.rmi/com.sun.jmx.remote.internal.rmi \
    java.management/com.sun.jmx.remote.security java.rmi/sun.rmi.registry \
    java.rmi/sun.rmi.server java.sql/java.sql java.base/java.lang.ref \
    jdk.unsupported/sun.misc jdk.attach/sun.tools.attach jdk.compiler/com.sun.tools.javac.file; do
    jvm+=(--add-exports "$m=ALL-UNNAMED")
  done
  for m in java.base/java.lang.module java.base/jdk.internal.loader java.base/jdk.internal.ref \
    java.base/jdk.internal.reflect java.base/jdk.internal.math java.base/jdk.internal.module \
    java.base/jdk.internal.util.jar jdk.management/com.sun.management.internal \
    java.base/sun.nio.ch java.base/java.io java.base/java.lang.reflect java.base/java.lang \
    java.base/java.util java.base/java.nio jdk.compiler/com.sun.tools.javac; do
    jvm+=(--add-opens "$m=ALL-UNNAMED")
  done
  # What bin/cassandra and cassandra-env.sh would otherwise set, plus
  # fast-start switches that are safe for a single throwaway node.
  jvm+=(
    "-Dcassandra.config=file://$CONF_DIR/cassandra.yaml"
    "-Dcassandra.storagedir=$DATA_DIR"
    "-Dcassandra.logdir=$LOG_DIR"
    "-Dlogback.configurationFile=$CONF_DIR/logback.xml"
    "-Dcassandra.triggers_dir=$CONF_DIR/triggers"
    -Dcassandra-foreground=yes
    "-Dcassandra.jmx.local.port=$JMX_PORT"
    -Dcassandra.skip_wait_for_gossip_to_settle=0
    -Dcassandra.ring_delay_ms=1000
    -Dcassandra.superuser_setup_delay_ms=0
    -Dcassandra.available_processors=2
    "${EXTRA_JVM[@]}"
  )

  # setsid: own session, so a Ctrl-C in the calling terminal does not reach
  # the node; nohup + redirects: it outlives this script.
  MALLOC_ARENA_MAX=4 nohup setsid java "${jvm[@]}" -cp "$LIB/*" \
    org.apache.cassandra.service.CassandraDaemon \
    >"$STDOUT_LOG" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
}

# Wait until CQL answers and the log says so; fail with the log on death or
# timeout. $1 = pid, $2 = start time (in $SECONDS).
wait_ready() {
  local pid=$1 started=$2
  while true; do
    if port_open && grep -q "$READY_LINE" "$SYSTEM_LOG" 2>/dev/null; then
      log "ready on $HOST:$CQL_PORT after $((SECONDS - started)) s"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "cassandra: process $pid died during start-up" >&2
      dump_logs
      rm -f "$PID_FILE"
      exit 1
    fi
    if ((SECONDS - started >= TIMEOUT)); then
      echo "cassandra: not ready after $TIMEOUT s (pid $pid still running; use 'stop')" >&2
      dump_logs
      exit 1
    fi
    sleep 1
  done
}

# ---------------------------------------------------------------------------
# Clusters: N nodes on 127.0.0.1 … 127.0.0.N, spread over D data centres
# ---------------------------------------------------------------------------
# Every node listens on its own loopback address with the same ports (9042
# CQL, 7000 storage) and its own JMX port (7200 + I). Node I is in data
# centre dc((I-1) mod D + 1), rack rack1: round robin, so 3 nodes in 2 data
# centres are dc1 = {1, 3} and dc2 = {2}. Node I has the single token
# -2^63 + (I-1) * floor(2^64 / N) (evenly spaced), the seed is node 1, and the
# snitch is GossipingPropertyFileSnitch with a cassandra-rackdc.properties
# per node. State (config, data, logs, pid) lives in
# $SNAPID_CLUSTER_DIR/nodeI. Nodes run without -Dcassandra.unsafesystem=true
# because tests kill them: a node that skipped syncing its system keyspaces
# comes back from SIGKILL without the schema made before.
#
# The host's single node also uses 127.0.0.1:9042, so a cluster runs in a
# network namespace of its own: scripts/cluster-test.sh makes one.
CLUSTER_DIR="${SNAPID_CLUSTER_DIR:-$CACHE/cluster}"
CLUSTER_HEAP="${SNAPID_CLUSTER_HEAP:-512m}"

# cluster_size prints N and D of the recorded cluster, or fails.
cluster_size() {
  [[ -f "$CLUSTER_DIR/nodes" ]] || die "no cluster recorded in $CLUSTER_DIR (run '$0 start --nodes N')"
  cat "$CLUSTER_DIR/nodes"
}

# node_vars I N D: the globals write_config, launch and wait_ready use, for
# node I of a cluster of N nodes in D data centres.
node_vars() {
  local i=$1 n=$2 d=$3
  local dir="$CLUSTER_DIR/node$i"
  WHAT="node $i of a throwaway test cluster of $n"
  HOST="127.0.0.$i"
  JMX_PORT=$((7200 + i))
  HEAP="$CLUSTER_HEAP"
  CLUSTER_NAME=snapid-cluster  # never gossips with the single node
  INITIAL_TOKEN="$(echo "-2^63 + ($i - 1) * (2^64 / $n)" | bc)"
  SNITCH=GossipingPropertyFileSnitch
  SEEDS="127.0.0.1:$STORAGE_PORT"
  NODE_DC="dc$(((i - 1) % d + 1))"
  CONF_DIR="$dir/conf"
  DATA_DIR="$dir/data"
  LOG_DIR="$dir/logs"
  PID_FILE="$dir/cassandra.pid"
  SYSTEM_LOG="$LOG_DIR/system.log"
  STDOUT_LOG="$LOG_DIR/stdout.log"
  TLS_DIR="$CLUSTER_DIR/tls"
  EXTRA_JVM=("-Dcassandra-rackdc.properties=file://$CONF_DIR/cassandra-rackdc.properties")
}

# node_pid: the pid of the current node (node_vars) if it is alive and is
# that node's Cassandra (a recycled pid is not).
node_pid() {
  local pid
  pid="$(live_pid)" || return 1
  grep -qF "$CONF_DIR/cassandra.yaml" "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

# parse_size ARGS...: sets N and D from --nodes N [--dcs D].
parse_size() {
  N="" D=1
  while (($#)); do
    case "$1" in
      --nodes) N="${2:-}"; shift 2 || die "--nodes needs a number" ;;
      --dcs) D="${2:-}"; shift 2 || die "--dcs needs a number" ;;
      *) die "unknown argument '$1' (want --nodes N [--dcs D])" ;;
    esac
  done
  [[ "$N" =~ ^[1-9][0-9]*$ ]] && ((N <= 9)) || die "--nodes wants a number from 1 to 9, not '$N'"
  [[ "$D" =~ ^[1-9][0-9]*$ ]] && ((D <= N)) || die "--dcs wants a number from 1 to --nodes ($N), not '$D'"
}

# port_open_at ADDR PORT
port_open_at() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

# launch_node I N D: writes node I's configuration and starts it (no wait).
launch_node() {
  node_vars "$1" "$2" "$3"
  write_config
  printf 'dc=%s\nrack=rack1\n' "$NODE_DC" >"$CONF_DIR/cassandra-rackdc.properties"
  # A restarted node appends to system.log: keep the old one aside, so the
  # ready line found is this start's.
  if [[ -f "$SYSTEM_LOG" ]]; then
    mv "$SYSTEM_LOG" "$SYSTEM_LOG.prev"
  fi
  launch
}

# wait_node I N D START: waits for node I's CQL port (wait_ready).
wait_node() {
  node_vars "$1" "$2" "$3"
  wait_ready "$(cat "$PID_FILE")" "$4"
}

cmd_cluster_start() {
  parse_size "$@"
  check_java
  fetch
  local started=$SECONDS i addr
  for ((i = 1; i <= N; i++)); do
    addr="127.0.0.$i"
    if port_open_at "$addr" "$CQL_PORT" || port_open_at "$addr" "$STORAGE_PORT"; then
      die "$addr:$CQL_PORT or :$STORAGE_PORT already answers (the host's single node, or a cluster still running?): run a cluster in a network namespace of its own (scripts/cluster-test.sh), or '$0 stop --cluster' first"
    fi
  done
  [[ -n "$CLUSTER_DIR" && "$CLUSTER_DIR" != "/" ]] || die "refusing to use SNAPID_CLUSTER_DIR='$CLUSTER_DIR'"
  if [[ -f "$CLUSTER_DIR/nodes" ]]; then
    cmd_cluster_stop
  fi
  rm -rf "$CLUSTER_DIR"/node*
  mkdir -p "$CLUSTER_DIR"
  echo "$N $D" >"$CLUSTER_DIR/nodes"
  TLS_DIR="$CLUSTER_DIR/tls"
  make_tls
  # The seed first; the others join it together (each has its token and
  # auto_bootstrap is off, so they stream nothing).
  launch_node 1 "$N" "$D"
  log "node 1 (127.0.0.1, $NODE_DC) started, pid $(cat "$PID_FILE")"
  wait_node 1 "$N" "$D" "$started"
  for ((i = 2; i <= N; i++)); do
    launch_node "$i" "$N" "$D"
    log "node $i (127.0.0.$i, $NODE_DC) started, pid $(cat "$PID_FILE")"
  done
  for ((i = 2; i <= N; i++)); do
    wait_node "$i" "$N" "$D" "$started"
  done
  log "cluster of $N nodes in $D data centre(s) ready after $((SECONDS - started)) s (state in $CLUSTER_DIR)"
}

# node_arg I: checks that I is a node of the recorded cluster; sets N, D.
node_arg() {
  read -r N D <<<"$(cluster_size)"
  [[ "${1:-}" =~ ^[1-9][0-9]*$ ]] && (($1 <= N)) || die "want a node number from 1 to $N, not '${1:-}'"
}

cmd_kill() {
  node_arg "${1:-}"
  node_vars "$1" "$N" "$D"
  local pid
  if ! pid="$(node_pid)"; then
    log "node $1 is not running"
    return 0
  fi
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  log "node $1 (127.0.0.$1) killed (pid $pid)"
}

cmd_start_node() {
  node_arg "${1:-}"
  node_vars "$1" "$N" "$D"
  local pid started=$SECONDS
  if pid="$(node_pid)"; then
    log "node $1 already running (pid $pid)"
    wait_ready "$pid" "$started"
    return 0
  fi
  launch_node "$1" "$N" "$D"
  log "node $1 (127.0.0.$1, $NODE_DC) restarted with its data, pid $(cat "$PID_FILE")"
  wait_node "$1" "$N" "$D" "$started"
}

# cmd_cluster_stop [quiet]: SIGTERM to every node, SIGKILL after 60 s.
cmd_cluster_stop() {
  local n d i pid k
  if [[ ! -f "$CLUSTER_DIR/nodes" ]]; then
    [[ "${1:-}" == quiet ]] || log "no cluster recorded in $CLUSTER_DIR"
    return 0
  fi
  read -r n d <"$CLUSTER_DIR/nodes"
  local -a pids=()
  for ((i = 1; i <= n; i++)); do
    node_vars "$i" "$n" "$d"
    if pid="$(node_pid)"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$PID_FILE"
  done
  for ((k = 0; k < 60; k++)); do
    local alive=()
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive+=("$pid")
    done
    pids=("${alive[@]}")
    ((${#pids[@]} == 0)) && break
    sleep 1
  done
  for pid in "${pids[@]}"; do
    log "pid $pid ignored SIGTERM for 60 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$CLUSTER_DIR/nodes"
  log "cluster of $n nodes stopped"
}

cmd_cluster_status() {
  local n d i pid rc=0
  if [[ ! -f "$CLUSTER_DIR/nodes" ]]; then
    echo "no cluster"
    return 1
  fi
  read -r n d <"$CLUSTER_DIR/nodes"
  for ((i = 1; i <= n; i++)); do
    node_vars "$i" "$n" "$d"
    if pid="$(node_pid)"; then
      echo "node $i 127.0.0.$i $NODE_DC running pid $pid"
    else
      echo "node $i 127.0.0.$i $NODE_DC not running"
      rc=1
    fi
  done
  return $rc
}

# ---------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------

# cluster_paired: whether the cluster directory belongs with the node's
# (see "What `stop` stops" at the top): SNAPID_CLUSTER_DIR given, or
# neither directory given.
cluster_paired() { [[ -n "${SNAPID_CLUSTER_DIR:-}" || -z "${SNAPID_CASSANDRA_DIR:-}" ]]; }
# The mode asked for, and the mode of the node running from RUN_DIR.
want_mode() { if [[ "$AUTH" == 1 ]]; then echo auth; else echo plain; fi; }
running_mode() { cat "$MODE_FILE" 2>/dev/null || echo unknown; }

cmd_start() {
  local pid started=$SECONDS
  if pid="$(live_pid)"; then
    if [[ "$(running_mode)" != "$(want_mode)" ]]; then
      die "already running (pid $pid) in $(running_mode) mode, not $(want_mode); run '$0 stop' first"
    fi
    if port_open; then
      log "already running (pid $pid, $(running_mode) mode) on $HOST:$CQL_PORT"
      return 0
    fi
    log "pid $pid is still starting; waiting for it"
    wait_ready "$pid" "$started"
    return 0
  fi
  if port_open; then
    log "$HOST:$CQL_PORT already answers (not started from $RUN_DIR); leaving it alone"
    return 0
  fi

  check_java
  fetch
  started=$SECONDS  # start-up time excludes the one-time download

  # Each run starts from a clean node unless asked otherwise.
  [[ -n "$RUN_DIR" && "$RUN_DIR" != "/" ]] || die "refusing to use RUN_DIR='$RUN_DIR'"
  if [[ "${SNAPID_CASSANDRA_KEEP:-0}" != 1 ]]; then
    rm -rf "$DATA_DIR" "$LOG_DIR"
  fi
  rm -f "$PID_FILE"
  make_tls
  write_config
  want_mode >"$MODE_FILE"
  launch
  pid="$(cat "$PID_FILE")"
  local how=""
  [[ "$AUTH" == 1 ]] && how=", password authentication"
  log "started pid $pid (cassandra $VERSION, state in $RUN_DIR$how); waiting up to $TIMEOUT s"
  wait_ready "$pid" "$started"
}

cmd_stop() {
  local pid i
  if ! pid="$(live_pid)"; then
    rm -f "$PID_FILE" "$MODE_FILE"
    log "not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PID_FILE" "$MODE_FILE"
      log "stopped (pid $pid) after $i s"
      return 0
    fi
    sleep 1
  done
  log "pid $pid ignored SIGTERM for 60 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  rm -f "$PID_FILE" "$MODE_FILE"
  log "killed (pid $pid)"
}

cmd_status() {
  if port_open; then
    if live_pid >/dev/null; then
      echo "running ($(running_mode) mode)"
    else
      echo "running (not started from $RUN_DIR)"
    fi
    return 0
  fi
  echo "not running"
  return 1
}

usage() {
  echo "usage: $0 start [--nodes N [--dcs D]] | stop [--cluster] | status [--cluster] | kill I | start-node I | fetch" >&2
  exit 2
}

case "${1:-}" in
  start)
    if (($# > 1)); then
      shift
      cmd_cluster_start "$@"
    else
      cmd_start
    fi
    ;;
  stop)
    case "${2:-}" in
      --cluster) cmd_cluster_stop ;;
      "")
        if cluster_paired; then
          (cmd_cluster_stop quiet) # a subshell: node_vars changes the globals
        elif [[ -f "$CLUSTER_DIR/nodes" ]]; then
          log "leaving the cluster recorded in $CLUSTER_DIR alone: SNAPID_CASSANDRA_DIR was given without SNAPID_CLUSTER_DIR ('$0 stop --cluster' stops it)"
        fi
        cmd_stop
        ;;
      *) usage ;;
    esac
    ;;
  status)
    case "${2:-}" in
      --cluster) cmd_cluster_status ;;
      "") cmd_status ;;
      *) usage ;;
    esac
    ;;
  fetch)
    check_java
    fetch
    ;;
  kill) cmd_kill "${2:-}" ;;
  start-node) cmd_start_node "${2:-}" ;;
  *) usage ;;
esac
