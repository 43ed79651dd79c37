#!/usr/bin/env bash
# Rate-limit decision services speaking Envoy's RLS v3 gRPC API (gubernator:
# its own V1 API), loaded in turn by the same closed-loop client, rlsload, on
# loopback. On 2 cores the client shares the CPUs with the server, so the
# ceiling is rlsnoop, a do-nothing RLS server under the same load.
#
#   rlsnoop         the ceiling: answers OK without looking
#   sluice-mem      `sluice serve` of this checkout, memory store, on rls/config
#   sluice-mem-tls  sluice-mem over TLS (a P-256 certificate; rlsload verifies it)
#   sluice-mem-mtls sluice-mem over mTLS (rlsload presents a client certificate)
#   sluice-redis    `sluice serve` on Redis 127.0.0.1:6379 (its keys under "sluice", with TTLs)
#   sluice          an already-running `sluice serve` at SLUICE_ADDR (optional)
#   ratelimit       envoyproxy/ratelimit on Redis 127.0.0.1:6379 (keys sluicebench_rl_*)
#   gubernator      gubernator-io/gubernator v2, one node, in memory
#
# Points: c = 1, 16, 64 × keys = 1, 10000 with one descriptor per call, and
# c = 64 with 16 descriptors per call. Before its points each limiter must
# answer OVER_LIMIT under the tight domain (10 a minute), which proves that it
# counts the benchmark's descriptors rather than passing them unmatched.
# ratelimit reads rls/config/*.yaml; a SLUICE_ADDR server needs the same two
# domains (sluicebench: key → 4e9/s, sluicebench_tight: key → 10/min).
#
#   DURATION (10s) and WARMUP (1s) per point
#   ROUNDS (1)   times to run the whole sequence; above 1, a table of each
#                point's median round (by calls/s; the lower of two) follows
#   SLUICE_ADDR  host:port of a running sluice RLS server to measure too
#   SLUICE_CHECK (1) 0 skips the OVER_LIMIT check for SLUICE_ADDR
#   SLUICE_PID   its pid(s), comma-separated, for its CPU column
#   REDIS_ADDR   (127.0.0.1:6379) for ratelimit
#   TLS (1)      0 skips sluice-mem-tls and sluice-mem-mtls
#   IMPLS        the rows to measure, of: rlsnoop sluice-mem sluice-redis
#                ratelimit gubernator (default all; the TLS rows go with
#                sluice-mem)
#   POINTS       the points, "c keys batch" separated by commas (default
#                the eight above)
#
# The TLS rows are measured right after sluice-mem's, in the same round, for
# their ratio to it: a fresh server each, on certificates made once per run
# into a temporary directory (an EC P-256 CA, a server certificate for
# 127.0.0.1 and localhost, a client certificate). rlsload opens one HTTP/2
# connection per 16 workers and handshakes before the warm-up, so they
# measure TLS's steady cost, not handshakes.
#
# Each row ends with the CPU, in cores, that the server (ratelimit with Redis),
# rlsload and every other process used: on a shared machine, "others" well
# above 0 marks a disturbed point.
#
# The two anchors are large builds: they are installed once into .bin/ (git
# ignored), named by version, and reused. The table goes to stdout and out/rls.txt.
set -euo pipefail
cd "$(dirname "$0")"
duration=${DURATION:-10s} warmup=${WARMUP:-1s} rounds=${ROUNDS:-1} tls=${TLS:-1}
redis=${REDIS_ADDR:-127.0.0.1:6379}
ratelimit_mod=github.com/envoyproxy/ratelimit/src/service_cmd
ratelimit_ver=v1.4.1-0.20260122083618-3fb702589d36
gubernator_mod=github.com/gubernator-io/gubernator/v2/cmd/gubernator
gubernator_ver=v2.13.0
points=("1 1 1" "1 10000 1" "16 1 1" "16 10000 1" "64 1 1" "64 10000 1" "64 1 16" "64 10000 16")
if [[ -n ${POINTS:-} ]]; then IFS=, read -r -a points <<<"$POINTS"; fi
impls=" ${IMPLS:-rlsnoop sluice-mem sluice-redis ratelimit gubernator} "
# wanted IMPL: whether IMPLS names IMPL.
wanted() { [[ $impls == *" $1 "* ]]; }

tmp=$(mktemp -d)
pid=
stop() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; fi
}
cleanup() { stop; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# anchor MOD VERSION NAME: go install into .bin/NAME@VERSION unless it is there.
anchor() {
  local dst=.bin/$3@$2
  if [[ ! -x $dst ]]; then
    echo "rls: building $1@$2 (once; cached in bench/$dst)" >&2
    mkdir -p .bin "$tmp/gobin"
    GOBIN=$tmp/gobin go install "$1@$2" >&2
    mv "$tmp/gobin/$(basename "$1")" "$dst"
  fi
  echo "$dst"
}
if wanted ratelimit; then ratelimit=$(anchor "$ratelimit_mod" "$ratelimit_ver" ratelimit); fi
if wanted gubernator; then gubernator=$(anchor "$gubernator_mod" "$gubernator_ver" gubernator); fi
go build -o "$tmp/rlsload" ./cmd/rlsload
go build -o "$tmp/rlsnoop" ./cmd/rlsnoop
(cd .. && go build -o "$tmp/sluice" ./cmd/sluice)

# certs DIR: a CA (ca.pem), a server certificate for IP 127.0.0.1 and DNS
# localhost (server.pem, server.key) and a client certificate (client.pem,
# client.key) it signed, all EC P-256, valid for two days. openssl's chatter
# goes to stderr.
certs() {
  local d=$1 name
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" \
    -days 2 -subj "/CN=sluice bench CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign || return
  printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'extendedKeyUsage=serverAuth' \
    'keyUsage=critical,digitalSignature' 'basicConstraints=critical,CA:FALSE' >"$d/server.ext"
  printf '%s\n' 'extendedKeyUsage=clientAuth' \
    'keyUsage=critical,digitalSignature' 'basicConstraints=critical,CA:FALSE' >"$d/client.ext"
  for name in server client; do
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/$name.key" -out "$d/$name.csr" \
      -subj "/CN=sluice bench $name" || return
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 2 -extfile "$d/$name.ext" -out "$d/$name.pem" || return
  done
}
if [[ $tls != 0 ]] && ! certs "$tmp/tls" 2>"$tmp/openssl.log"; then
  cat "$tmp/openssl.log" >&2
  echo "rls: openssl could not make the TLS certificates (TLS=0 skips the TLS rows)" >&2
  exit 1
fi

# freeport: a loopback TCP port nothing listens on and not handed out before
# (kept in $ports, so call it outside $(...)).
ports=" "
freeport() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    [[ $ports == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p ports+="$p "; return; fi
  done
}

# listener HOST:PORT: the pid that listens there, if ss can tell (for the
# Redis server's CPU, counted with ratelimit's).
listener() {
  ss -H -ltnp "sport = :${1##*:}" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true
}

header=-header
# measure IMPL PROTO ADDR CHECK [PID [RLSLOAD-FLAGS...]]: the tight-domain
# check if CHECK is 1, then every point, each row also kept in $tmp/rows.
# Fails, after trying every point, if anything failed.
measure() {
  local impl=$1 proto=$2 addr=$3 check=$4 c keys batch rc=0
  local load=("$tmp/rlsload" -proto "$proto" -addr "$addr" -impl "$impl" -warmup "$warmup" -pid "${5:-0}" "${@:6}")
  if [[ $check == 1 ]] && ! "${load[@]}" -d 1s -c 4 -domain sluicebench_tight -limit 10 -min-over 50 >/dev/null; then
    echo "rls: $impl: no OVER_LIMIT in the tight domain; not measured" >&2
    if [[ -f $tmp/$impl.log ]]; then tail -20 "$tmp/$impl.log" >&2; fi
    return 1
  fi
  for pt in "${points[@]}"; do
    read -r c keys batch <<<"$pt"
    "${load[@]}" -d "$duration" -c "$c" -keys "$keys" -batch "$batch" $header | tee -a "$tmp/rows" || rc=1
    header=
  done
  if [[ $rc != 0 && -f $tmp/$impl.log ]]; then tail -20 "$tmp/$impl.log" >&2; fi
  return "$rc"
}

mkdir -p out
exec > >(tee out/rls.txt)
failed=0
echo "rls.sh: DURATION=$duration WARMUP=$warmup, $(nproc) cores, $(go version | cut -d' ' -f3), ratelimit@$ratelimit_ver, gubernator@$gubernator_ver"

for round in $(seq "$rounds"); do
  echo "round $round of $rounds"
  if wanted rlsnoop; then
    freeport
    "$tmp/rlsnoop" -addr "127.0.0.1:$port" 2>"$tmp/rlsnoop.log" & pid=$!
    measure rlsnoop rls "127.0.0.1:$port" 0 "$pid" || failed=1
    stop
  fi

  # sluice serve reads ratelimit's files unchanged. Its TLS variants, on the
  # memory store, right after sluice-mem: the server's certificate verified
  # by rlsload; for mTLS, rlsload's by the server (every listener asks).
  variants=()
  if wanted sluice-mem; then
    variants=(mem)
    if [[ $tls != 0 ]]; then variants+=(mem-tls mem-mtls); fi
  fi
  if wanted sluice-redis; then variants+=(redis); fi
  for variant in "${variants[@]}"; do
    freeport; grpc=$port; freeport; http=$port; freeport; admin=$port
    extra=() loadtls=()
    case $variant in
    redis) extra=(--redis "$redis") ;;
    mem-tls | mem-mtls)
      extra=(--tls-cert-file "$tmp/tls/server.pem" --tls-key-file "$tmp/tls/server.key")
      loadtls=(-ca "$tmp/tls/ca.pem")
      if [[ $variant == mem-mtls ]]; then
        extra+=(--tls-client-ca-file "$tmp/tls/ca.pem")
        loadtls+=(-cert "$tmp/tls/client.pem" -key "$tmp/tls/client.key")
      fi
      ;;
    esac
    "$tmp/sluice" serve --config rls/config --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
      --admin-addr "127.0.0.1:$admin" "${extra[@]}" 2>"$tmp/sluice-$variant.log" & pid=$!
    pids=$pid
    if [[ $variant == redis ]]; then pids="$pid,$(listener "$redis")"; fi
    measure "sluice-$variant" rls "127.0.0.1:$grpc" 1 "$pids" "${loadtls[@]}" || failed=1
    stop
  done

  if [[ -n ${SLUICE_ADDR:-} ]]; then
    measure sluice rls "$SLUICE_ADDR" "${SLUICE_CHECK:-1}" "${SLUICE_PID:-}" || failed=1
  fi

  # envoyproxy/ratelimit: settings from src/settings/settings.go. Config from
  # RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY = ./rls/config, read
  # in place (RUNTIME_WATCH_ROOT=false); no stats sink, no expiry jitter, so its
  # per-second keys leave the shared Redis within a second of the run.
  if wanted ratelimit; then
  freeport; grpc=$port; freeport; http=$port; freeport; debug=$port
  env USE_STATSD=false DISABLE_STATS=true LOG_LEVEL=warn \
    REDIS_SOCKET_TYPE=tcp REDIS_URL="$redis" CACHE_KEY_PREFIX=sluicebench_rl_ EXPIRATION_JITTER_MAX_SECONDS=0 \
    RUNTIME_ROOT="$PWD" RUNTIME_SUBDIRECTORY=rls RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false \
    HOST=127.0.0.1 PORT="$http" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" \
    "$ratelimit" >"$tmp/ratelimit.log" 2>&1 & pid=$!
  measure ratelimit rls "127.0.0.1:$grpc" 1 "$pid,$(listener "$redis")" || failed=1
  stop
  fi

  # gubernator: settings from config.go. One node: member-list discovery on
  # loopback with itself as the only known node (discovery "none" leaves the
  # peer list empty, and every call fails). Tracing off, as ratelimit's is.
  if wanted gubernator; then
  freeport; grpc=$port; freeport; http=$port; freeport; ml=$port
  env GUBER_GRPC_ADDRESS="127.0.0.1:$grpc" GUBER_HTTP_ADDRESS="127.0.0.1:$http" \
    GUBER_MEMBERLIST_ADDRESS="127.0.0.1:$ml" GUBER_MEMBERLIST_BIND_ADDRESS="127.0.0.1:$ml" GUBER_MEMBERLIST_KNOWN_NODES="127.0.0.1:$ml" \
    GUBER_LOG_LEVEL=warn OTEL_TRACES_EXPORTER=none OTEL_TRACES_SAMPLER=always_off \
    "$gubernator" >"$tmp/gubernator.log" 2>&1 & pid=$!
  measure gubernator gubernator "127.0.0.1:$grpc" 1 "$pid" || failed=1
  stop
  fi
done

if ((rounds > 1)); then
  echo
  echo "median round of $rounds per point, by calls/s"
  grep -m1 '^impl ' "$tmp/rows"
  # Rows keep their first-seen order; within a point, sort by calls/s (field 5).
  grep -v '^impl ' "$tmp/rows" | awk '
    { k = $1 " " $2 " " $3 " " $4; if (!(k in cnt)) order[++m] = k; row[k, ++cnt[k]] = $0; cps[k, cnt[k]] = $5 }
    END {
      for (i = 1; i <= m; i++) {
        k = order[i]; c = cnt[k]
        for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++)
          if (cps[k, b] < cps[k, a]) { t = cps[k, a]; cps[k, a] = cps[k, b]; cps[k, b] = t; t = row[k, a]; row[k, a] = row[k, b]; row[k, b] = t }
        print row[k, int((c + 1) / 2)]
      }
    }'
fi
exit "$failed"
