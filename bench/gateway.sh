#!/usr/bin/env bash
# make bench-gateway: `sluice gateway` against a plain httputil.ReverseProxy,
# both in front of the same upstream, loaded by wrk on loopback in
# alternating rounds. Prints each round and the median ratio.
#   ROUNDS (3), DURATION (10s), CONNS (64), THREADS (2)
#   BASE: a git revision; its gateway is built too and loaded in the same
#   rounds, so each round also gives this tree's gateway against BASE's.
set -euo pipefail
cd "$(dirname "$0")"
rounds=${ROUNDS:-3} duration=${DURATION:-10s} conns=${CONNS:-64} threads=${THREADS:-2} base=${BASE:-}
command -v wrk >/dev/null || { echo "bench-gateway: wrk is needed (apt-get install wrk)" >&2; exit 1; }
bin=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  [ -z "$base" ] || git worktree remove --force "$bin/base" 2>/dev/null || true
  rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/proxybench" ./cmd/proxybench
(cd .. && go build -o "$bin/sluice" ./cmd/sluice)
"$bin/proxybench" -mode upstream -listen 127.0.0.1:18081 & pids+=($!)
"$bin/proxybench" -mode proxy -listen 127.0.0.1:18082 -upstream http://127.0.0.1:18081 & pids+=($!)
"$bin/sluice" gateway --config gateway.yaml --upstream http://127.0.0.1:18081 2>"$bin/gateway.log" & pids+=($!)
ports="18081 18082 18080"
if [ -n "$base" ]; then
  git worktree add --detach "$bin/base" "$base" >/dev/null 2>&1
  (cd "$bin/base" && go build -o "$bin/sluice-base" ./cmd/sluice)
  sed -e 's/127.0.0.1:18080/127.0.0.1:18083/' -e 's/127.0.0.1:19090/127.0.0.1:19093/' gateway.yaml > "$bin/gateway-base.yaml"
  "$bin/sluice-base" gateway --config "$bin/gateway-base.yaml" --upstream http://127.0.0.1:18081 2>"$bin/gateway-base.log" & pids+=($!)
  ports="$ports 18083"
fi
for port in $ports; do
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  [ "$port" = 18081 ] || [ "$port" = 18082 ] || curl -sfi "http://127.0.0.1:$port/" | grep -qi '^ratelimit:' ||
    { echo "bench-gateway: the gateway on $port does not limit" >&2; cat "$bin"/gateway*.log >&2; exit 1; }
done
rate() { wrk -t"$threads" -c"$conns" -d"$duration" --latency "$1" | tee -a "$bin/wrk.txt" | awk '/^Requests\/sec/ {print $2} /^ +99%/ {p99=$2} END {print p99}' | paste -sd' '; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a/b}'; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "wrk -t$threads -c$conns -d$duration, $rounds rounds; requests/s and p99${base:+; BASE=$base}"
ratios=() against=()
for r in $(seq "$rounds"); do
  read -r plain plain99 < <(rate http://127.0.0.1:18082/)
  # With BASE, the two gateways take turns going first.
  if [ -n "$base" ] && [ $((r % 2)) -eq 0 ]; then read -r old old99 < <(rate http://127.0.0.1:18083/); fi
  read -r gw gw99 < <(rate http://127.0.0.1:18080/)
  if [ -n "$base" ] && [ $((r % 2)) -eq 1 ]; then read -r old old99 < <(rate http://127.0.0.1:18083/); fi
  ratios+=("$(ratio "$gw" "$plain")")
  printf 'round %d: plain ReverseProxy %s/s (p99 %s), sluice gateway %s/s (p99 %s): %s×' "$r" "$plain" "$plain99" "$gw" "$gw99" "${ratios[-1]}"
  if [ -n "$base" ]; then
    against+=("$(ratio "$gw" "$old")")
    printf '; BASE gateway %s/s (p99 %s): %s× of the plain one, this one is %s× BASE' "$old" "$old99" "$(ratio "$old" "$plain")" "${against[-1]}"
  fi
  echo
done
echo "median ratio: $(median "${ratios[@]}")×"
[ -z "$base" ] || echo "median against BASE: $(median "${against[@]}")×"
