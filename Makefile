# Conveniences; the README's commands are the reference.
.PHONY: test bench run

run:
	go run ./cmd/snapctl next

# Everything the tests need, then every test (what CI runs).
test:
	bash scripts/test.sh

# Regenerates bench/results (tables, JSON, plot) from one run.
bench:
	bash bench/run.sh
