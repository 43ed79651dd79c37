#!/usr/bin/env bash
# make bench-gateway: `sluice gateway` against nginx with limit_req and
# against a plain httputil.ReverseProxy, all in front of the same upstream,
# loaded by wrk on loopback in alternating rounds (the order turns each
# round). Prints each round (requests/s, p50, p99) and the medians.
#   ROUNDS (3), DURATION (10s), CONNS (64), THREADS (2)
#   BASE: a git revision; its gateway is built too and loaded in the same
#   rounds, so each round also gives this tree's gateway against BASE's.
# nginx is Debian's nginx-light, installed when missing (as root, or with
# sudo). A row that answers anything but 2xx is reported and fails the run:
# a limiter refusing is not a proxy being fast.
set -euo pipefail
cd "$(dirname "$0")"
rounds=${ROUNDS:-3} duration=${DURATION:-10s} conns=${CONNS:-64} threads=${THREADS:-2} base=${BASE:-}
install() {
  if [ "$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
  else sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; fi
}
command -v wrk >/dev/null || install wrk
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || install nginx-light
nginx=$(command -v nginx || echo /usr/sbin/nginx)
bin=$(mktemp -d)
chmod 755 "$bin" # nginx's workers run as nobody
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
"$bin/proxybench" -mode fasthttp -listen 127.0.0.1:18085 -upstream http://127.0.0.1:18081 & pids+=($!)
"$bin/sluice" gateway --config gateway.yaml --upstream http://127.0.0.1:18081 2>"$bin/gateway.log" & pids+=($!)
sed -e "s#PREFIX#$bin#g" -e 's#LISTEN#127.0.0.1:18084#' -e 's#UPSTREAM#127.0.0.1:18081#' nginx.conf > "$bin/nginx.conf"
"$nginx" -c "$bin/nginx.conf" -p "$bin" 2>"$bin/nginx.log" & pids+=($!)
names=(plain gateway nginx fasthttp) ports=(18082 18080 18084 18085)
declare -A label=([plain]="plain Go ReverseProxy" [gateway]="sluice gateway" [nginx]="nginx limit_req" [fasthttp]="fasthttp proxy, nothing in it" [base]="BASE gateway")
if [ -n "$base" ]; then
  git worktree add --detach "$bin/base" "$base" >/dev/null 2>&1
  (cd "$bin/base" && go build -o "$bin/sluice-base" ./cmd/sluice)
  sed -e 's/127.0.0.1:18080/127.0.0.1:18083/' -e 's/127.0.0.1:19090/127.0.0.1:19093/' gateway.yaml > "$bin/gateway-base.yaml"
  "$bin/sluice-base" gateway --config "$bin/gateway-base.yaml" --upstream http://127.0.0.1:18081 2>"$bin/gateway-base.log" & pids+=($!)
  names+=(base) ports+=(18083)
fi
for i in "${!names[@]}"; do
  port=${ports[$i]} up=
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && up=1 && break; sleep 0.1; done
  [ -n "$up" ] || { echo "bench-gateway: ${label[${names[$i]}]} does not answer on $port" >&2; cat "$bin"/*.log >&2; exit 1; }
  case ${names[$i]} in gateway | base)
    curl -sfi "http://127.0.0.1:$port/" | grep -qi '^ratelimit:' ||
      { echo "bench-gateway: the gateway on $port does not limit" >&2; cat "$bin"/gateway*.log >&2; exit 1; } ;;
  esac
done
# load URL: "requests/s p50 p99 non-2xx", latencies in ms.
load() {
  wrk -t"$threads" -c"$conns" -d"$duration" --latency "$1" | tee -a "$bin/wrk.txt" | awk '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /^Requests\/sec/ {rps = $2} /^ +50%/ {p50 = ms($2)} /^ +99%/ {p99 = ms($2)} /Non-2xx/ {bad = $NF}
    END {printf "%s %.2f %.2f %d\n", rps, p50, p99, bad}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A rps p50 p99
failed=
echo "wrk -t$threads -c$conns -d$duration --latency, $rounds rounds, the order turning each round${base:+; BASE=$base}"
echo "| round | row | requests/s | p50 ms | p99 ms |"
echo "|---|---|---|---|---|"
n=${#names[@]}
for r in $(seq "$rounds"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + r - 1) % n)) name=${names[$i]}
    read -r xr x50 x99 bad < <(load "http://127.0.0.1:${ports[$i]}/")
    if [ "$bad" != 0 ]; then echo "bench-gateway: ${label[$name]} answered $bad requests with a status other than 2xx" >&2; failed=1; fi
    rps[$name]+="$xr " p50[$name]+="$x50 " p99[$name]+="$x99 "
    echo "| $r | ${label[$name]} | $xr | $x50 | $x99 |"
  done
done
echo
echo "Medians over the rounds:"
echo "| row | requests/s | p50 ms | p99 ms |"
echo "|---|---|---|---|"
declare -A m99 mrps
for name in "${names[@]}"; do
  # shellcheck disable=SC2086
  mrps[$name]=$(median ${rps[$name]}) m99[$name]=$(median ${p99[$name]})
  # shellcheck disable=SC2086
  echo "| ${label[$name]} | ${mrps[$name]} | $(median ${p50[$name]}) | ${m99[$name]} |"
done
echo
echo "sluice gateway: $(ratio "${mrps[gateway]}" "${mrps[plain]}")× the plain Go proxy's requests/s (target ≥ 1.5), $(ratio "${mrps[gateway]}" "${mrps[nginx]}")× nginx limit_req's (target ≥ 0.6), p99 $(ratio "${m99[gateway]}" "${m99[nginx]}")× nginx's (target ≤ 2)"
[ -z "$base" ] || echo "against BASE: $(ratio "${mrps[gateway]}" "${mrps[base]}")× its requests/s, p99 $(ratio "${m99[gateway]}" "${m99[base]}")× its p99"
[ -z "$failed" ]
