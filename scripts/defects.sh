#!/usr/bin/env bash
# defects.sh puts back, one at a time, each defect of scripts/defects/ (a
# patch against the code, with the checks that must catch it) and runs
# those checks: each must fail. A defect no check catches, or a patch
# that no longer applies to the code, fails the run.
#
#   bash scripts/defects.sh [patch...]   (default: every scripts/defects/*.patch)
#
# A patch's header says what the defect is and which checks catch it:
#   Defect: <one sentence>
#   Caught by: sim                       the simulator (SNAPID_DEFECT_HISTORIES
#                                        histories, default 300) finds a violation
#   Caught by: test <package> <regexp>   go test -run <regexp> <package> fails
#
# Environment: SNAPID_DEFECT_HISTORIES (default 300).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
histories="${SNAPID_DEFECT_HISTORIES:-300}"
patches=("$@")
if [[ ${#patches[@]} -eq 0 ]]; then
  patches=("$root"/scripts/defects/*.patch)
fi

work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
# The defects are put back into the committed code (HEAD), in a worktree
# of its own.
git -C "$root" worktree add --detach -q "$work/tree" HEAD

failed=0
for p in "${patches[@]}"; do
  p="$(realpath "$p")"
  name="$(basename "$p" .patch)"
  if ! (cd "$work/tree" && git apply "$p"); then
    echo "defects: $name: the patch no longer applies: put the defect back by hand and write the patch again"
    failed=1
    continue
  fi
  if ! (cd "$work/tree" && go vet ./... >"$work/out" 2>&1); then
    echo "defects: $name: the code with the defect put back does not build:"
    sed 's/^/  /' "$work/out" | head -20
    failed=1
    (cd "$work/tree" && git checkout -q . && git clean -qfd)
    continue
  fi
  checks=0
  missed=()
  while IFS= read -r line; do
    check="${line#Caught by: }"
    checks=$((checks + 1))
    case "$check" in
    sim)
      if (cd "$work/tree" && SNAPID_SIM_HISTORIES="$histories" go test -count=1 -run 'TestSimulation$' ./internal/sim >"$work/out" 2>&1); then
        missed+=("the simulator ($histories histories)")
      else
        grep -m1 -E 'violation|FAIL:' "$work/out" | sed "s/^/defects: $name: caught: /" | cut -c1-200 || true
      fi
      ;;
    test\ *)
      read -r _ pkg re <<<"$check"
      if (cd "$work/tree" && go test -count=1 -run "$re" "$pkg" >"$work/out" 2>&1); then
        missed+=("go test -run '$re' $pkg")
      else
        echo "defects: $name: caught by go test -run '$re' $pkg"
      fi
      ;;
    *)
      echo "defects: $name: unknown check: $check"
      failed=1
      ;;
    esac
  done < <(grep '^Caught by: ' "$p")
  if [[ $checks -eq 0 ]]; then
    echo "defects: $name: the patch names no check (Caught by: ...)"
    failed=1
  fi
  for m in "${missed[@]+"${missed[@]}"}"; do
    echo "defects: $name: NOT CAUGHT by $m"
    failed=1
  done
  (cd "$work/tree" && git checkout -q . && git clean -qfd)
done
exit $failed
