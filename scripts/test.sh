#!/usr/bin/env bash
# The whole test suite, with everything it needs: this is the README's test
# command and what CI runs (.ci/run).
#
#   1. starts a real Apache Cassandra 5.0 on 127.0.0.1:9042 (fetched from
#      Maven Central on first use, cached in ~/.cache/snapid), unless one is
#      already answering there; stops it at the end, also on failure, if it
#      started it (but step 3 stops and restarts whichever node is running,
#      one already running before too: see step 3);
#   2. checks formatting (gofmt), go vet and staticcheck, and the alerting
#      rules with promtool (check rules, and their unit tests in
#      docs/alerts_test.yml; the Debian package prometheus, which has
#      promtool, is installed with apt-get if promtool is missing);
#   3. runs the Cassandra outage test on its own (it stops and restarts
#      Cassandra under a running Generator, with scripts/cassandra.sh stop
#      and start: a node that was already running before this script is
#      stopped too, and the start that brings it back wipes what it stored;
#      it is left running);
#   4. starts, beside the steps that follow, the power-loss tests
#      (internal/powerfs, a module of its own: a FUSE file system that
#      forgets unsynced writes, and more than a thousand power cuts under
#      running processes; they need root and /dev/fuse, and fail (never
#      skip) without them; alone: bash scripts/test.sh --power) and the
#      tests against a real cluster of 3 nodes in 2 data centres
#      (scripts/cluster-test.sh: node failures, partitions, a coordinator
#      killed mid-claim, the nemesis history test, sequences across a
#      partition, claim latency), in a network namespace of their own,
#      apart from the node of step 1;
#   5. runs every test with the race detector, CI=true so that a missing
#      Cassandra fails instead of skipping (internal/docstest among them:
#      every shell block of README.md and docs/tutorial.md, its output
#      checked, and the docs' links, defaults and capacity arithmetic); then builds, vets and tests the
#      library again with the oldest Go it declares (go.mod's go line,
#      go1.25.0: the toolchain is fetched from the module proxy once);
#   6. runs the simulator (internal/sim) in full without the race
#      detector: 10,000 random histories of operations and faults, every
#      guarantee checked (SNAPID_SIM_HISTORIES, SNAPID_SIM_DURATION change
#      how many; make soak runs it for 30 minutes);
#   7. puts back, one at a time, each defect of scripts/defects/ and
#      checks that the simulator (and the tests each names) catch it
#      (scripts/defects.sh);
#   8. runs each fuzz target for a count of inputs (a count, not a
#      duration: go test's fuzzing coordinator can fail a target that found
#      nothing when a -fuzztime duration ends while a busy machine starves
#      its workers);
#   9. runs the benchmark module's tests (bench/), which check its workloads;
#  10. waits for the steps of 4, and prints what they printed;
#  11. restarts Cassandra requiring passwords and permissions and runs the
#      authentication tests (TLS tests run in step 5: the node always takes
#      TLS clients beside plain ones).
#
# Each step prints how many seconds it took.
# Environment: SNAPID_FUZZTIME (default 100000x: inputs per target), SNAPID_BUSY_LOOPS
# (that many busy loops compete for the CPUs for the whole run, as on a
# shared CI runner; default 0), and those of scripts/cassandra.sh.
#
#   bash scripts/test.sh --under-load   (make test-under-load)
# runs only the root package's, registrytest's and internal/statefile's
# tests, with the race detector, SNAPID_LOAD_ROUNDS times in a row
# (default 4) while SNAPID_BUSY_LOOPS busy loops (default 8) compete for
# the CPUs; every round must pass. It needs no Cassandra.
#
#   bash scripts/test.sh --prefetch     (make prefetch)
# fetches everything the test command downloads, and nothing else runs:
# the Go modules of the three modules (the root, internal/powerfs and
# bench), with their tests' dependencies (of the root, its whole module
# graph); staticcheck (go run …@v0.8.2);
# the oldest declared toolchain (go.mod's go line); Cassandra's jars
# (scripts/cassandra.sh fetch, into SNAPID_CACHE); and, as root, the
# Debian packages prometheus (promtool) and nftables (nft) if missing.
# Then the command runs without network, in a network namespace (see
# docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest Go the library declares (go.mod): embedders may build with
# it, so the library and its tests must build and pass with it too.
min_go="go$(awk '$1 == "go" { print $2; exit }' go.mod)"
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2

# prefetch: see --prefetch above. Each download is one the test command
# would make: the same modules, tool versions and toolchain.
prefetch() {
  local m
  for m in . internal/powerfs bench; do
    echo "test: prefetch: the Go modules of $m, and those of its tests"
    (cd "$m" && go mod download && go list -deps -test ./... >/dev/null)
  done
  # The README's replace route from a checkout runs go mod tidy, which
  # reads every module of the root's graph, its dependencies' tests' too
  # (internal/docstest runs it). go mod download all would add their sums
  # to go.sum: it works on a copy.
  echo "test: prefetch: every module of the root's graph (the README's go mod tidy reads them)"
  local copy
  copy="$(mktemp -d)"
  cp go.mod "$copy/go.mod" && cp go.sum "$copy/go.sum"
  go mod download -modfile="$copy/go.mod" all
  rm -rf "$copy"
  echo "test: prefetch: $staticcheck"
  go run "$staticcheck" -version
  echo "test: prefetch: the $min_go toolchain, and the modules with it"
  GOTOOLCHAIN="$min_go" go list -deps -test ./... >/dev/null
  GOTOOLCHAIN="$min_go" go version
  echo "test: prefetch: Cassandra (scripts/cassandra.sh fetch)"
  bash scripts/cassandra.sh fetch
  local need=()
  command -v promtool >/dev/null || need+=(prometheus)
  command -v nft >/dev/null || need+=(nftables)
  if ((${#need[@]} > 0)); then
    if [ "$(id -u)" != 0 ]; then
      echo "test: prefetch: ${need[*]} missing: run as root to install them (the test command runs as root and installs them itself where there is network)" >&2
      return 1
    fi
    echo "test: prefetch: installing ${need[*]}"
    apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
  fi
  echo "test: prefetch: done; the test command needs no network now: in a namespace without one, set GOPROXY=file://$(go env GOMODCACHE)/cache/download (go run pkg@version asks the proxy which module holds pkg; that one answers from the module cache)"
}

if [[ "${1:-}" == --prefetch ]]; then
  prefetch
  exit
fi

# The tests of what other users of the host can do run programs as another
# user (setpriv), and the power-loss step needs FUSE: both need root. Run
# as anyone else, they would be skipped and the command would pass without
# trying them, so it fails instead; SNAPID_REQUIRE_ROOT makes each such test
# fail, not skip, if it is ever run without root all the same.
if [ "$(id -u)" != 0 ]; then
  echo "test: the test command needs root (the tests of other users' attacks run programs as another user; the power-loss tests need FUSE): run it as root, e.g. sudo bash scripts/test.sh" >&2
  exit 1
fi
export SNAPID_REQUIRE_ROOT=1

# took STEP START: prints how long STEP took since START (in $SECONDS).
took() { echo "test: $1 took $((SECONDS - $2)) s"; }

# Busy loops this script started (each `sh -c 'while :; do :; done'`); they
# are killed, by their pids, when the script exits, also on failure.
busy_pids=()
start_busy_loops() {
  local n=$1 i
  for ((i = 0; i < n; i++)); do
    sh -c 'while :; do :; done' &
    busy_pids+=($!)
  done
  if ((n > 0)); then
    echo "test: $n busy loops compete for the CPUs (pids ${busy_pids[*]})"
  fi
}
stop_busy_loops() {
  if ((${#busy_pids[@]} > 0)); then
    kill "${busy_pids[@]}" 2>/dev/null || true
    wait "${busy_pids[@]}" 2>/dev/null || true
    busy_pids=()
  fi
}

if [[ "${1:-}" == --under-load ]]; then
  trap stop_busy_loops EXIT
  trap 'exit 130' INT TERM
  rounds="${SNAPID_LOAD_ROUNDS:-4}"
  start_busy_loops "${SNAPID_BUSY_LOOPS:-8}"
  all=$SECONDS
  for ((round = 1; round <= rounds; round++)); do
    t=$SECONDS
    echo "test: under load, round $round of $rounds: go test -race ./internal/engine ./registry/registrytest ./internal/statefile"
    if ! CI=true go test -race -count=1 -timeout 30m ./internal/engine ./registry/registrytest ./internal/statefile; then
      echo "test: under load, round $round of $rounds failed" >&2
      exit 1
    fi
    took "round $round under load" "$t"
  done
  echo "test: under load: $rounds rounds in a row passed in $((SECONDS - all)) s"
  exit 0
fi

ci_asked="${CI:-}"  # CI=true from the caller: nothing may be skipped
export CI="${CI:-true}"
# The node of step 1 takes passwords only when step 11 asks for them.
unset SNAPID_CASSANDRA_AUTH
fuzztime="${SNAPID_FUZZTIME:-100000x}"


# power_loss: the power-loss step (8); it must show every test passing.
power_loss() {
  echo "test: power loss (internal/powerfs: FUSE, power cuts under running processes)"
  local out
  out="$(mktemp)"
  # With the race detector and fewer cuts (-short), then every cut without
  # it (the children re-run the test binary, which the detector slows
  # several times).
  (cd internal/powerfs && go vet ./... && go run "$staticcheck" ./... &&
    CI=true go test -race -short -count=1 -timeout 30m ./... &&
    CI=true go test -count=1 -timeout 30m -v ./...) >"$out" 2>&1 || {
    cat "$out"
    rm -f "$out"
    return 1
  }
  grep -E '^(--- |ok|PASS|FAIL)|power cuts|TOTAL|returned again' "$out" || true
  # A test skipped or failed fails the step; so does a missing TestPowerCut.
  # Skipped subtests are the conformance suite's cases for what the test
  # registry does not offer (it keeps no sequences).
  if grep -E -- '^--- SKIP|--- FAIL' "$out" >&2 || ! grep -q -- '--- PASS: TestPowerCut ' "$out"; then
    echo "test: the power-loss tests did not all pass" >&2
    rm -f "$out"
    return 1
  fi
  rm -f "$out"
}

if [[ "${1:-}" == --power ]]; then
  power_loss
  exit
fi

started=0
power_pid=
cluster_pid=
cleanup() {
  stop_busy_loops
  local pid
  for pid in $power_pid $cluster_pid; do
    # Each runs in a process group of its own (see below): the whole
    # group goes, the test binaries it started among it.
    kill -TERM -- "-$pid" 2>/dev/null || kill -- "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n $cluster_pid ]]; then
    bash scripts/cassandra.sh stop --cluster >/dev/null 2>&1 || true
  fi
  if [[ $started == 1 ]]; then
    bash scripts/cassandra.sh stop || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start_busy_loops "${SNAPID_BUSY_LOOPS:-0}"

if status="$(bash scripts/cassandra.sh status 2>/dev/null)"; then
  if [[ "$status" == *"auth mode"* ]]; then
    echo "test: the Cassandra running from ~/.cache/snapid/run requires passwords (left by an interrupted run?): run 'bash scripts/cassandra.sh stop' first" >&2
    exit 1
  fi
  echo "test: using the Cassandra already running on 127.0.0.1:9042 ($status)"
else
  started=1
  t=$SECONDS
  bash scripts/cassandra.sh start
  took "starting Cassandra" "$t"
fi

t=$SECONDS
echo "test: gofmt and go vet"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [[ -n "$unformatted" ]]; then
  echo "test: not gofmt'ed:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
echo "test: staticcheck"
go run "$staticcheck" ./...
echo "test: alerting rules (promtool)"
if ! command -v promtool >/dev/null; then
  apt-get install -y -q --no-install-recommends prometheus >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
fi
promtool check rules docs/alerts.yml
promtool test rules docs/alerts_test.yml
took "gofmt, go vet, staticcheck and promtool" "$t"

# run_alone ENV TESTS PACKAGES...: runs the named tests (a|b) verbosely with
# ENV=1, and fails unless each of them passed (not skipped, not missing).
run_alone() {
  local env=$1 tests=$2 out
  shift 2
  out="$(mktemp)"
  env "$env=1" go test -race -count=1 -run "^($tests)\$" -v "$@" >"$out" 2>&1 || {
    grep -vE '^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8} ([A-Z]{3} )?gocql: ' "$out" || true
    rm -f "$out"
    return 1
  }
  grep -vE '^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8} ([A-Z]{3} )?gocql: ' "$out" | grep -E '^(---|ok|PASS|FAIL)' || true
  local t
  for t in ${tests//|/ }; do
    grep -q -- "--- PASS: $t " "$out" || {
      echo "test: $t did not pass (skipped or not found)" >&2
      rm -f "$out"
      return 1
    }
  done
  rm -f "$out"
}

t=$SECONDS
echo "test: Cassandra outage (stops and restarts Cassandra, so it runs alone)"
run_alone SNAPID_OUTAGE_TEST TestCassandraOutage ./cassandra
took "the outage test" "$t"

# The power-loss and cluster steps run beside the others, from here on:
# the power-loss tests wait mostly on their FUSE file system and their
# children, the cluster tests mostly on Cassandra's nodes (in a network
# namespace of their own, apart from the node of step 1). Their lines are
# printed when they have ended. Nothing from here on stops or restarts
# the node of step 1 (scripts/cassandra.sh stop would stop the cluster
# too) until both have ended.
power_out="$(mktemp)"
cluster_out="$(mktemp)"
set -m # each in a process group of its own, which the cleanup kills whole
(
  p=$SECONDS
  power_loss && took "the power-loss step" "$p"
) >"$power_out" 2>&1 &
power_pid=$!
(
  c=$SECONDS
  echo "test: clusters (3 nodes, 2 data centres, in a network namespace)"
  bash scripts/cluster-test.sh && took "the cluster step" "$c"
) >"$cluster_out" 2>&1 &
cluster_pid=$!
set +m
echo "test: the power-loss step (pid $power_pid) and the cluster step (pid $cluster_pid) run beside the next steps"

t=$SECONDS
echo "test: go test -race ./..."
go test -race -count=1 -timeout 45m ./...
took "go test -race ./..." "$t"

t=$SECONDS
# The oldest Go the library declares (min_go, from go.mod).
echo "test: the oldest declared toolchain ($min_go): go vet and go test -short ./..."
GOTOOLCHAIN="$min_go" go vet ./...
GOTOOLCHAIN="$min_go" go test -short -count=1 -timeout 45m ./...
took "the $min_go build and tests" "$t"

t=$SECONDS
# The simulator's full run, without the race detector (step 3 ran it with
# fewer histories): random histories of operations and faults, every
# guarantee checked; its last line counts them, and any violation fails.
echo "test: simulation (internal/sim)"
sim_out="$(mktemp)"
if ! go test -count=1 -timeout 10m -run '^TestSimulation$' -v ./internal/sim >"$sim_out" 2>&1; then
  cat "$sim_out"
  rm -f "$sim_out"
  exit 1
fi
grep -E '^sim: ' "$sim_out" | tail -1
grep -qE '^sim: [0-9]+ histories, [0-9]+ operations, [0-9]+ faults, 0 violations$' "$sim_out" || {
  echo "test: the simulation did not report 0 violations" >&2
  rm -f "$sim_out"
  exit 1
}
rm -f "$sim_out"
# That the histories reach what the simulator claims to exercise: 400 of
# them, one after another (skipped under -short and the race detector).
go test -count=1 -timeout 30m -run '^TestSimulationReaches$' ./internal/sim
took "the simulation" "$t"

t=$SECONDS
# Each defect of scripts/defects/ put back, one at a time: the checks its
# patch names must catch it.
echo "test: defects put back (scripts/defects.sh)"
bash scripts/defects.sh
took "the defects put back" "$t"

t=$SECONDS
echo "test: fuzzing each target (-fuzztime $fuzztime)"
go test -run '^$' -fuzz '^FuzzParseID$' -fuzztime "$fuzztime" ./internal/idform
for target in FuzzValidateName FuzzDecodeCounter; do
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" ./internal/engine
done
took "fuzzing" "$t"

if [[ -f bench/go.mod ]]; then
  t=$SECONDS
  echo "test: bench module"
  (cd bench && go vet ./... && go test -race -count=1 ./...)
  took "the bench module" "$t"
fi

t=$SECONDS
echo "test: waiting for the power-loss and cluster steps"
power_rc=0
wait "$power_pid" || power_rc=$?
power_pid=
cluster_rc=0
wait "$cluster_pid" || cluster_rc=$?
cluster_pid=
cat "$power_out" "$cluster_out"
rm -f "$power_out" "$cluster_out"
if ((cluster_rc != 0 || power_rc != 0)); then
  ((cluster_rc == 0)) || echo "test: the cluster step failed" >&2
  ((power_rc == 0)) || echo "test: the power-loss step failed" >&2
  exit 1
fi
took "waiting for the power-loss and cluster steps" "$t"

t=$SECONDS
if [[ $started == 1 ]]; then
  echo "test: password authentication (restarts Cassandra requiring passwords)"
  bash scripts/cassandra.sh stop
  SNAPID_CASSANDRA_AUTH=1 bash scripts/cassandra.sh start
  run_alone SNAPID_AUTH_TEST 'TestCassandraPasswordAuth|TestRegistryCommandsPasswordAuth' ./cassandra ./internal/cli
elif [[ "$ci_asked" == true ]]; then
  echo "test: the authentication step restarts Cassandra, so it needs a node this script starts: run 'bash scripts/cassandra.sh stop' first" >&2
  exit 1
else
  # Restarting a node this script did not start is not its business.
  echo "test: SKIPPED the authentication step: it needs a Cassandra this script starts (run 'bash scripts/cassandra.sh stop' first)"
fi
took "the authentication step" "$t"

echo "test: all passed"
