# Conveniences; the README's commands are the reference.
.PHONY: test prefetch test-under-load bench bench-quick run soak scale

run:
	go run ./cmd/snapctl next

# Everything the tests need, then every test (what CI runs).
test:
	bash scripts/test.sh

# Fetches everything the test command downloads (Go modules, staticcheck,
# the oldest declared Go toolchain, Cassandra's jars, promtool and nft),
# so that it then runs without network; see docs/testing.md.
prefetch:
	bash scripts/test.sh --prefetch

# The root package's, registrytest's and internal/statefile's tests with the
# race detector, 4 rounds in a row while 8 busy loops compete for the CPUs
# (SNAPID_LOAD_ROUNDS, SNAPID_BUSY_LOOPS change them); see docs/testing.md.
test-under-load:
	bash scripts/test.sh --under-load

# Regenerates bench/results and BENCHMARKS.md's tables: every benchmark
# 6 times at -benchtime 2s (the report program's defaults), medians with
# confidence intervals; about 13 minutes on 2 cores. Run it on a quiet machine.
bench:
	bash bench/run.sh

# Tries the benchmark harness: -count 2 -benchtime 200ms, results in a
# temporary directory, BENCHMARKS.md left alone.
bench-quick:
	bash bench/run.sh -quick

# The simulator for a long soak: random histories for 30 minutes (or
# SOAK=2h); a failure prints the seed, the shrunk history and how to
# replay it.
SOAK ?= 30m
soak:
	SNAPID_SIM_DURATION=$(SOAK) go test -count=1 -timeout 0 -run '^TestSimulation$$' -v ./internal/sim

# The scale harness against the test node and a three-node cluster, Paxos
# v1 and v2: registry capacity, steady load by fleet size, a start-up
# storm (bench/results/scale.md); about 25 minutes.
scale:
	bash scripts/scale.sh
