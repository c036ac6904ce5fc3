#!/usr/bin/env bash
# The scale harness (bench/scale) against a real node and a real cluster,
# with Paxos v1 and v2 side by side: what `make scale` runs. About 25
# minutes on 2 cores. Writes bench/results/scale-*.json and .png and
# bench/results/scale.md (every table), which BENCHMARKS.md quotes.
#
#   1. the single test node (scripts/cassandra.sh start: its data is wiped),
#      Paxos v1: capacity, steady state at several fleet sizes (8 processes
#      per host, and 32 at one size), a start-up storm;
#   2. the same node restarted with Paxos v2: capacity and the storm;
#   3. three nodes in two data centres (in a network namespace of its own,
#      as scripts/cluster-test.sh does), Paxos v1: capacity, steady state,
#      the storm of 500 hosts; then with Paxos v2: capacity.
#
# Environment: SCALE_FLAGS (extra flags for every run, for example
# "-duration 20s -capacity-duration 5s" for a quicker try), SCALE_ONLY
# (node or cluster: that part only) and those of scripts/cassandra.sh. The
# single node is stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results
bin_dir="${SCALE_BIN:-}"
export SNAPID_CLUSTER_DIR="${SNAPID_CLUSTER_DIR:-${SNAPID_CACHE:-$HOME/.cache/snapid}/cluster}"

run() { # label file flags...
  local label=$1 file=$2
  shift 2
  echo "scale: $label"
  # shellcheck disable=SC2086
  "$bin_dir/scale" -label "$label" -out "$out/scale-$file.json" -plot "$out/scale-$file.png" "$@" ${SCALE_FLAGS:-} |
    tee "$out/scale-$file.md"
}

if [[ "${1:-}" == --inside ]]; then
  # The cluster, in its own network namespace.
  bin_dir=$2
  ip link set lo up
  trap 'bash scripts/cassandra.sh stop --cluster || true' EXIT
  # Every simulated host in dc1: its storm leases from dc1's partition.
  cluster=(-cassandra 127.0.0.1,127.0.0.2,127.0.0.3 -replication class=NetworkTopologyStrategy,dc1=2,dc2=1 -local-dc dc1 -workers 32,128,512)
  for v in v1 v2; do
    SNAPID_PAXOS_VARIANT=$v bash scripts/cassandra.sh start --nodes 3 --dcs 2
    if [[ $v == v1 ]]; then
      run "3 nodes in 2 data centres, Paxos v1" cluster-v1 "${cluster[@]}" -hosts 50,100,200,400 -procs 8
    else
      run "3 nodes in 2 data centres, Paxos v2" cluster-v2 "${cluster[@]}" -mode capacity,storm
    fi
    bash scripts/cassandra.sh stop --cluster
  done
  exit 0
fi

mkdir -p "$out"
bin_dir=$(mktemp -d)
trap 'rm -rf "$bin_dir"; bash scripts/cassandra.sh stop >/dev/null 2>&1 || true' EXIT
(cd bench && go build -o "$bin_dir/scale" ./scale)
bash scripts/cassandra.sh fetch

if [[ "${SCALE_ONLY:-node}" == node || -z "${SCALE_ONLY:-}" ]]; then
  SNAPID_PAXOS_VARIANT=v1 bash scripts/cassandra.sh start
  run "1 node, Paxos v1" node-v1 -hosts 50,100,200,400 -procs 8
  run "1 node, Paxos v1, 32 processes per host" node-v1-p32 -mode steady -hosts 100 -procs 32
  bash scripts/cassandra.sh stop
  SNAPID_PAXOS_VARIANT=v2 bash scripts/cassandra.sh start
  run "1 node, Paxos v2" node-v2 -mode capacity,storm
  bash scripts/cassandra.sh stop
fi
if [[ "${SCALE_ONLY:-cluster}" == cluster ]]; then
  unshare --net --fork bash "$0" --inside "$bin_dir"
fi
cat "$out"/scale-node-v1.md "$out"/scale-node-v1-p32.md "$out"/scale-node-v2.md \
  "$out"/scale-cluster-v1.md "$out"/scale-cluster-v2.md >"$out/scale.md"
echo "scale: tables in $out/scale.md"
