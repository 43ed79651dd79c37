#!/usr/bin/env bash
# make bench-gateway: `sluice gateway` against a plain httputil.ReverseProxy,
# both in front of the same upstream, loaded by wrk on loopback in
# alternating rounds. Prints each round and the median ratio.
#   ROUNDS (3), DURATION (10s), CONNS (64), THREADS (2)
set -euo pipefail
cd "$(dirname "$0")"
rounds=${ROUNDS:-3} duration=${DURATION:-10s} conns=${CONNS:-64} threads=${THREADS:-2}
command -v wrk >/dev/null || { echo "bench-gateway: wrk is needed (apt-get install wrk)" >&2; exit 1; }
bin=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$bin"; }
trap cleanup EXIT
go build -o "$bin/proxybench" ./cmd/proxybench
(cd .. && go build -o "$bin/sluice" ./cmd/sluice)
"$bin/proxybench" -mode upstream -listen 127.0.0.1:18081 & pids+=($!)
"$bin/proxybench" -mode proxy -listen 127.0.0.1:18082 -upstream http://127.0.0.1:18081 & pids+=($!)
"$bin/sluice" gateway --config gateway.yaml --upstream http://127.0.0.1:18081 2>"$bin/gateway.log" & pids+=($!)
for port in 18081 18082 18080; do
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done
curl -sfi http://127.0.0.1:18080/ | grep -qi '^ratelimit:' || { echo "bench-gateway: the gateway does not limit" >&2; cat "$bin/gateway.log" >&2; exit 1; }
rate() { wrk -t"$threads" -c"$conns" -d"$duration" --latency "$1" | tee -a "$bin/wrk.txt" | awk '/^Requests\/sec/ {print $2} /^ +99%/ {p99=$2} END {print p99}' | paste -sd' '; }
echo "wrk -t$threads -c$conns -d$duration, $rounds rounds; requests/s and p99"
ratios=()
for r in $(seq "$rounds"); do
  read -r plain plain99 < <(rate http://127.0.0.1:18082/)
  read -r gw gw99 < <(rate http://127.0.0.1:18080/)
  ratio=$(awk -v a="$gw" -v b="$plain" 'BEGIN {printf "%.3f", a/b}')
  ratios+=("$ratio")
  printf 'round %d: plain ReverseProxy %s/s (p99 %s), sluice gateway %s/s (p99 %s): %s×\n' "$r" "$plain" "$plain99" "$gw" "$gw99" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median ratio: %s×\n", a[int((NR+1)/2)]}'
