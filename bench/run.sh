#!/usr/bin/env bash
# Regenerates bench/results/ (latest.txt, latest.json, tables.md,
# ids_per_second.png): runs the comparison and multi-process benchmarks of
# the bench module and the library's BenchmarkUniqueID and BenchmarkFloor.
# Flags go to the report program, e.g.: bash bench/run.sh -benchtime 2s
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec go run ./report "$@"
