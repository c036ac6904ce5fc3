#!/usr/bin/env bash
# The whole test suite, with everything it needs: this is the README's test
# command and what CI runs (.ci/run).
#
#   1. starts a real Apache Cassandra 5.0 on 127.0.0.1:9042 (fetched from
#      Maven Central on first use, cached in ~/.cache/snapid), unless one is
#      already answering there; stops it at the end, also on failure, if it
#      started it;
#   2. checks formatting (gofmt), go vet and staticcheck;
#   3. runs every test with the race detector, CI=true so that a missing
#      Cassandra fails instead of skipping;
#   4. runs the Cassandra outage test on its own (it stops and restarts
#      Cassandra under a running Generator);
#   5. restarts Cassandra requiring passwords and permissions and runs the
#      authentication tests (TLS tests run in step 3: the node always takes
#      TLS clients beside plain ones);
#   6. runs each fuzz target briefly;
#   7. runs the benchmark module's tests (bench/), which check its workloads.
#
# Environment: SNAPID_FUZZTIME (default 10s per target), and those of
# scripts/cassandra.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

export CI="${CI:-true}"
fuzztime="${SNAPID_FUZZTIME:-10s}"

started=0
cleanup() {
  if [[ $started == 1 ]]; then
    bash scripts/cassandra.sh stop || true
  fi
}
trap cleanup EXIT

if bash scripts/cassandra.sh status >/dev/null 2>&1; then
  echo "test: using the Cassandra already running on 127.0.0.1:9042"
else
  started=1
  bash scripts/cassandra.sh start
fi

echo "test: gofmt and go vet"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [[ -n "$unformatted" ]]; then
  echo "test: not gofmt'ed:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
echo "test: staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "test: go test -race ./..."
go test -race -count=1 -timeout 20m ./...

echo "test: Cassandra outage (stops and restarts Cassandra, so it runs alone)"
SNAPID_OUTAGE_TEST=1 go test -race -count=1 -run '^TestCassandraOutage$' -v . 2>&1 | { grep -v ' gocql: ' || true; }

if [[ $started == 1 ]]; then
  echo "test: password authentication (restarts Cassandra requiring passwords)"
  bash scripts/cassandra.sh stop
  SNAPID_CASSANDRA_AUTH=1 bash scripts/cassandra.sh start
  SNAPID_AUTH_TEST=1 go test -race -count=1 -run 'PasswordAuth$' -v . ./cmd/snapctl 2>&1 | { grep -v ' gocql: ' || true; }
else
  # Restarting a node this script did not start is not its business.
  echo "test: SKIPPED the authentication step: it needs a Cassandra this script starts (run 'bash scripts/cassandra.sh stop' first)"
fi

echo "test: fuzzing each target for $fuzztime"
for target in FuzzParseID FuzzValidateName FuzzDecodeCounter; do
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" .
done

if [[ -f bench/go.mod ]]; then
  echo "test: bench module"
  (cd bench && go vet ./... && go test -race -count=1 ./...)
fi
echo "test: all passed"
