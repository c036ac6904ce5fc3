#!/usr/bin/env bash
# Regenerates bench/results/ (latest.txt, latest.json, tables.md,
# ids_per_second.png) and the generated part of BENCHMARKS.md: runs the
# comparison and multi-process benchmarks of the bench module and the
# library's BenchmarkUniqueID and BenchmarkFloor, each -count 6 times at
# -benchtime 2s (about 13 minutes on 2 cores), and reports medians with
# confidence intervals. Flags go to the report program (go run ./report -h):
#
#	bash bench/run.sh -quick                # a try: -count 2 -benchtime 200ms, to $TMPDIR
#	bash bench/run.sh -count 10 -benchtime 3s
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec go run ./report "$@"
