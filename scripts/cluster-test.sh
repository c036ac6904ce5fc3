#!/usr/bin/env bash
# The tests against real multi-node clusters: a step of
# scripts/test.sh, also runnable alone.
#
#   1. builds the test binary of snapid/cassandra (the namespace below has
#      no network), fetches Cassandra once (scripts/cassandra.sh fetch) and
#      installs nftables with apt-get if `nft` is missing;
#   2. enters a new network namespace (unshare --net, loopback up), so that
#      the cluster and its partition rules never touch the host's network,
#      its single test node on 127.0.0.1:9042 or its firewall; the rules
#      vanish with the namespace;
#   3. starts 3 nodes in 2 data centres there (scripts/cassandra.sh start
#      --nodes 3 --dcs 2: dc1 = 127.0.0.1 and .3, dc2 = 127.0.0.2), state in
#      $SNAPID_CLUSTER_DIR (default ~/.cache/snapid/cluster);
#   4. runs the cluster tests (TESTS below), and fails unless each of them
#      passed (a skip or a missing test fails), then the claim latency
#      benchmark;
#   5. stops every node at the end, also on failure.
#
# Environment: SNAPID_CLUSTER_BENCHTIME (default 100x), SNAPID_CLUSTER_TESTS
# (a|b: run only those tests, and no benchmark; for debugging) and those
# of scripts/cassandra.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=3
DCS=2
TESTS='TestClusterNodeFailures|TestClusterPartition|TestClusterLocalSerialSplitBrain|TestClusterCoordinatorKilledMidClaim|TestClusterNemesis|TestSequenceTwoDCPartition|TestClusterSequenceReplicaLoss'
# SNAPID_CLUSTER_TESTS=TestA|TestB runs only those (and no benchmark).
if [[ -n "${SNAPID_CLUSTER_TESTS:-}" ]]; then
  TESTS="$SNAPID_CLUSTER_TESTS"
fi
BENCH='BenchmarkClusterClaim'
export SNAPID_CLUSTER_DIR="${SNAPID_CLUSTER_DIR:-${SNAPID_CACHE:-$HOME/.cache/snapid}/cluster}"

secs() { echo "cluster-test: $1 took $(($(date +%s) - $2)) s"; }

if [[ "${1:-}" != --inside ]]; then
  t=$(date +%s)
  bin="$(mktemp -d)"
  trap 'rm -rf "$bin"' EXIT
  go test -c -race -o "$bin/cassandra.test" ./cassandra
  bash scripts/cassandra.sh fetch
  if ! command -v nft >/dev/null; then
    echo "cluster-test: installing nftables"
    apt-get install -y -q nftables >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q nftables >/dev/null; }
  fi
  secs "building and fetching" "$t"
  unshare --net --fork bash "$0" --inside "$bin"
  exit 0
fi

# Inside the namespace.
bin="$2"
ip link set lo up
stop_all() {
  nft delete table ip snapid_partition 2>/dev/null || true
  bash scripts/cassandra.sh stop --cluster || true
}
trap stop_all EXIT

t=$(date +%s)
bash scripts/cassandra.sh start --nodes "$NODES" --dcs "$DCS"
secs "starting $NODES nodes in $DCS data centres" "$t"
addrs="" dcs=""
for ((i = 1; i <= NODES; i++)); do
  addrs+="${addrs:+,}127.0.0.$i"
  dcs+="${dcs:+,}dc$(((i - 1) % DCS + 1))"  # the rule of scripts/cassandra.sh
done
export SNAPID_CLUSTER_NODES="$addrs" SNAPID_CLUSTER_DCS="$dcs"
export CI="${CI:-true}"

# gocql's own log lines (reconnection attempts to killed nodes) are noise.
quiet() { grep -vE '^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8} ([A-Z]{3} )?gocql: ' || true; }
nodumps() { awk '/^goroutine [0-9]+ \[/ { skip = 1 } /^(=== |--- |PASS|FAIL|ok )/ { skip = 0 } !skip'; }

t=$(date +%s)
out="$bin/tests.out"
rc=0
(cd cassandra && "$bin/cassandra.test" -test.run "^($TESTS)\$" -test.v -test.count=1 -test.timeout 25m) >"$out" 2>&1 || rc=$?
if [[ $rc != 0 ]]; then
  # The tests' own lines, without goroutine dumps (a timeout's panic line
  # and the tests it names come before the first dump).
  quiet <"$out" | nodumps | tail -n 150
  echo "cluster-test: the cluster tests failed" >&2
  exit 1
fi
quiet <"$out" | grep -E '^(=== RUN|---|ok|PASS|FAIL|panic)|(cluster_.*|sequence_partition)_test.go' || true
for name in ${TESTS//|/ }; do
  grep -q -- "--- PASS: $name " "$out" || {
    echo "cluster-test: $name did not pass (skipped or not found)" >&2
    exit 1
  }
done
secs "the cluster tests" "$t"

if [[ -n "${SNAPID_CLUSTER_TESTS:-}" || -z "$BENCH" ]]; then
  echo "cluster-test: only $TESTS, no benchmark"
  exit 0
fi
t=$(date +%s)
(cd cassandra && "$bin/cassandra.test" -test.run '^$' -test.bench "^($BENCH)\$" \
  -test.benchtime "${SNAPID_CLUSTER_BENCHTIME:-100x}" -test.count=1 -test.timeout 10m) >"$out" 2>&1 || {
  quiet <"$out" | nodumps | tail -n 60
  echo "cluster-test: the cluster benchmark failed" >&2
  exit 1
}
quiet <"$out" | grep -E '^(Benchmark|goos|goarch|cpu|ok|PASS)' || true
grep -q "^$BENCH/" "$out" || { echo "cluster-test: $BENCH did not run" >&2; exit 1; }
secs "the cluster benchmark" "$t"

t=$(date +%s)
stop_all
trap - EXIT
secs "stopping the cluster" "$t"
echo "cluster-test: all passed"
