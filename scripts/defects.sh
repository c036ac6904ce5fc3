#!/usr/bin/env bash
# defects.sh puts back, one at a time, each defect of scripts/defects/ (a
# patch against the code, with the checks that must catch it) and runs
# those checks: each must fail because of the defect. Every check first
# runs on the code as committed, where it must pass, so that a check that
# fails for another reason (a misspelt package, a test that matches
# nothing, a broken environment) is never taken for a catch.
#
#   bash scripts/defects.sh [patch...]   (default: every scripts/defects/*.patch)
#
# A patch's header says what the defect is and which checks catch it:
#   Defect: <one sentence>
#   Caught by: sim                       the simulator, in up to
#                                        SNAPID_DEFECT_HISTORIES histories
#                                        (default 300), reports violations
#   Caught by: sim seed <N>              the simulator's history of seed N
#                                        (one the random runs reach only
#                                        rarely), its steps one at a time
#                                        (SNAPID_SIM_SERIAL=1), reports
#                                        violations
#   Caught by: test <package> <regexp>   go test -run <regexp> <package>
#                                        reports a failing test
#
# The run fails if a check misses its defect, if a patch no longer
# applies, if the code with it does not build, or if a check does not
# pass on the committed code. The defects go into a worktree of HEAD:
# commit what they are checked against.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
histories="${SNAPID_DEFECT_HISTORIES:-300}"
patches=("$@")
if [[ ${#patches[@]} -eq 0 ]]; then
  patches=("$root"/scripts/defects/*.patch)
fi
# The simulator's other settings are its defaults here, whatever the
# caller's environment says.
for v in $(compgen -e | grep '^SNAPID_SIM_' || true); do unset "$v"; done

work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach -q "$work/tree" HEAD

# check runs one check in the worktree and says what it found: "pass",
# "caught" (the simulator reported violations, or a test failed), or
# "error" (it failed for another reason: its output is in $work/out).
check() {
  local c="$1" out="$work/out" rc=0
  case "$c" in
  sim | sim\ seed\ *)
    local env=(SNAPID_SIM_HISTORIES="$histories")
    [[ "$c" == sim ]] || env=(SNAPID_SIM_SEED="${c#sim seed }" SNAPID_SIM_SERIAL=1)
    (cd "$work/tree" && env "${env[@]}" go test -count=1 -run '^TestSimulation$' -v ./internal/sim) >"$out" 2>&1 || rc=$?
    if grep -qE '^sim: [0-9]+ histories, [0-9]+ operations, [0-9]+ faults, [1-9][0-9]* violations' "$out"; then
      echo caught
    elif [[ $rc -eq 0 ]] && grep -qE '^sim: [0-9]+ histories, [0-9]+ operations, [0-9]+ faults, 0 violations$' "$out"; then
      echo pass
    else
      echo error
    fi
    ;;
  test\ *)
    local pkg re
    read -r _ pkg re <<<"$c"
    (cd "$work/tree" && go test -count=1 -v -run "$re" "$pkg") >"$out" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]] && grep -qE '^--- FAIL: ' "$out"; then
      echo caught
    elif [[ $rc -eq 0 ]] && grep -qE '^--- PASS: ' "$out"; then
      echo pass
    else
      echo error
    fi
    ;;
  *)
    echo error
    echo "unknown check: $c" >"$out"
    ;;
  esac
}

failed=0
# Every check, once, on the committed code: it must pass there.
declare -A passes=()
for p in "${patches[@]}"; do
  while IFS= read -r line; do
    c="${line#Caught by: }"
    [[ -n "${passes[$c]+x}" ]] && continue
    passes[$c]="$(check "$c")"
    if [[ "${passes[$c]}" != pass ]]; then
      echo "defects: the check '$c' does not pass on the committed code:"
      tail -20 "$work/out" | sed 's/^/  /'
      failed=1
    fi
  done < <(grep '^Caught by: ' "$p")
done
[[ $failed -eq 0 ]] || exit 1

for p in "${patches[@]}"; do
  p="$(realpath "$p")"
  name="$(basename "$p" .patch)"
  if ! grep -q '^Caught by: ' "$p"; then
    echo "defects: $name: the patch names no check (Caught by: ...)"
    failed=1
    continue
  fi
  if ! (cd "$work/tree" && git apply "$p"); then
    echo "defects: $name: the patch no longer applies: put the defect back by hand and write the patch again"
    failed=1
    continue
  fi
  if ! (cd "$work/tree" && go vet ./...) >"$work/out" 2>&1; then
    echo "defects: $name: the code with the defect put back does not build:"
    head -20 "$work/out" | sed 's/^/  /'
    failed=1
  else
    while IFS= read -r line; do
      c="${line#Caught by: }"
      case "$(check "$c")" in
      caught)
        echo "defects: $name: caught by '$c': $(grep -m1 -E '^sim: [0-9]+ histories|^--- FAIL: ' "$work/out" | cut -c1-120)"
        ;;
      pass)
        echo "defects: $name: NOT CAUGHT by '$c'"
        failed=1
        ;;
      *)
        echo "defects: $name: the check '$c' failed for another reason than the defect:"
        tail -20 "$work/out" | sed 's/^/  /'
        failed=1
        ;;
      esac
    done < <(grep '^Caught by: ' "$p")
  fi
  (cd "$work/tree" && git checkout -q . && git clean -qfd)
done
exit $failed
