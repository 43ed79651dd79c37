#!/usr/bin/env bash
# make bench-http BASE=REV: BenchmarkMiddleware/impl=sluice of REV and of
# this tree, one run each in turn, COUNT times (so both see the same
# machine), then benchstat REV against this tree.
#   BASE (required), COUNT (6), BENCHTIME (1s), OUT (out)
set -euo pipefail
cd "$(dirname "$0")"
base=${BASE:?give BASE=<git revision>} count=${COUNT:-6} benchtime=${BENCHTIME:-1s} out=${OUT:-out}
mkdir -p "$out"
tree=$(mktemp -d)
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git worktree add --detach "$tree" "$base" >/dev/null 2>&1
run() { (cd "$1" && go test -run '^$' -bench 'Middleware/impl=sluice$' -benchtime "$benchtime" -count 1 .) | grep '^Benchmark'; }
: >"$out/http-base.txt"; : >"$out/http-now.txt"
for i in $(seq "$count"); do
  run "$tree/bench" | tee -a "$out/http-base.txt"
  run . | tee -a "$out/http-now.txt"
done
go tool -modfile=../tools/go.mod benchstat "base=$out/http-base.txt" "now=$out/http-now.txt" | tee "$out/http-base.benchstat"
