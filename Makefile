# sluice — make targets. `make test` is the test command of the README and CI.

GO        ?= go
TOOL      := $(GO) tool -modfile=tools/go.mod
FUZZTIME  ?= 30s
FUZZ_PKGS ?= ./...
# The parsers of what arrives from the network (requests, headers,
# addresses, configuration files, a Redis server's replies, the queue file's records, the
# origins and URLs tasks may be sent to), fuzzed in CI
# 30 s each (50 s until the fleet's tests made CI longer: fuzz each for less rather than drop one).
EDGE_PKGS := ./clientip ./ratelimitheader ./httplimit ./grpclimit ./gateway ./gateway/config ./gateway/upstream ./rls ./pace ./redisstore ./boltqueue ./egress ./relay/config ./relay/httpapi ./lease
BENCHTIME ?= 1s
COUNT     ?= 6
OUT       := bench/out

.PHONY: test lint fuzz fuzz-edge bench bench-memory bench-redis bench-http bench-gateway bench-rls bench-pace bench-queue sim fault soak bench-queue-memory bench-relay-memory bench-fleet algorithms help

help:
	@echo "make test          the tests, with -race and -shuffle (the README's test command)"
	@echo "make lint          gofmt, go vet, staticcheck (pinned in tools/go.mod)"
	@echo "make fuzz          every fuzz target (of FUZZ_PKGS) for FUZZTIME (default $(FUZZTIME))"
	@echo "make fuzz-edge     the network-facing parsers (headers, addresses, config), 30 s each: CI runs it"
	@echo "make bench         benchmarks against x/time/rate and go-limiter, COUNT runs, benchstat in $(OUT)/"
	@echo "make bench-memory  the memory figures: heap per key at 1e6 keys, 1e7 keys under MaxKeys 1e6"
	@echo "make bench-redis   decisions/s on Redis against redis_rate and redis-benchmark's ceiling"
	@echo "make bench-http    the HTTP middleware against go-chi/httprate and go-limiter's httplimit (BASE=REV: against REV's, benchstat)"
	@echo "make bench-gateway sluice gateway against nginx limit_req, a plain ReverseProxy and a bare fasthttp proxy, with wrk (ROUNDS, DURATION; BASE=REV)"
	@echo "make bench-rls     sluice serve (memory, Redis) against envoyproxy/ratelimit, gubernator and a do-nothing RLS server (ROUNDS, DURATION)"
	@echo "make bench-pace    the client pacer's cost per call against x/time/rate's Limiter.Wait"
	@echo "make bench-queue   durable queues side by side: River, asynq, JetStream, raw bbolt, sluice's queues (DURATION, ROUNDS; IMPL, SCENARIO lists)"
	@echo "make algorithms    docs/algorithms.md's tables and plots, regenerated with sluice sim (make test checks them)"
	@echo "make sim           the client against sluice's own middleware, 5×L offered, on a simulated clock: the figures of docs/BENCHMARKS.md"
	@echo "make bench-queue-memory  RSS of a consumer with 1e6 tasks queued against 1e3 (boltqueue)"
	@echo "make bench-relay-memory  RSS of a relay draining 1e6 queued tasks against 1e3"
	@echo "make bench-fleet   relay processes sharing L = 400/s: leased partitions against one shared Redis bucket, steady, uneven, cut; kill and regional"
	@echo "make soak          the queue's kill -9 harness, 1000 trials (CI runs 100 in make test); the fleet's faults, 50 injections each (CI: 5)"
	@echo "make fault         the Redis outage run with the issue's bounds (timeout + 10 ms)"

test:
	$(GO) test -race -shuffle=on -count=1 ./...
	# The allocation tests again without -race (the race detector allocates),
	# and the timed figures the race detector would make meaningless: pace's
	# 500/s rows and its runs against nginx, the relay's end-to-end runs, the
	# fleet's fault runs (relay processes sharing a limit under leases).
	$(GO) test -count=1 -run 'Alloc|TestSimulationMatrix' ./...
	$(GO) test -count=1 -p 1 -run 'TestEndToEnd|TestSharedTarget|TestNginx|TestFleet' ./relay ./pace ./lease ./server
	cd bench && $(GO) vet ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(TOOL) staticcheck ./...
	cd bench && $(GO) vet ./... && $(GO) tool -modfile=../tools/go.mod staticcheck ./...

# Every Fuzz target of every package, one after the other. A failure counts
# when it wrote a failing input to testdata/fuzz/ (as every crash, panic or
# failed property does). Go 1.26's fuzzing coordinator can also fail a run at
# the -fuzztime boundary with a bare "context deadline exceeded" and no input
# (golang/go#75804, fixed in Go 1.27): that one is reported and not counted.
fuzz:
	@set -e; out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for pkg in $$($(GO) list $(FUZZ_PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg)/testdata/fuzz; \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target ($(FUZZTIME))"; \
	    before=$$(ls $$dir/$$target 2>/dev/null | wc -l); rc=0; \
	    $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg > $$out 2>&1 || rc=$$?; \
	    cat $$out; \
	    if [ $$rc -ne 0 ]; then \
	      after=$$(ls $$dir/$$target 2>/dev/null | wc -l); \
	      if [ $$after -eq $$before ] && grep -q '^    context deadline exceeded$$' $$out && ! grep -q 'Failing input' $$out; then \
	        echo "fuzz: $$target stopped on Go's -fuzztime deadline race (golang/go#75804), with no failing input: not counted"; \
	      else exit $$rc; fi; \
	    fi; \
	  done; \
	done

fuzz-edge:
	$(MAKE) fuzz FUZZ_PKGS="$(EDGE_PKGS)" FUZZTIME=30s

bench:
	mkdir -p $(OUT)
	cd bench && $(GO) test -run '^$$' -bench 'OneKey|ManyKeys' -benchtime $(BENCHTIME) -count $(COUNT) . | tee ../$(OUT)/compare.txt
	$(TOOL) benchstat -col /impl $(OUT)/compare.txt | tee $(OUT)/compare.benchstat

bench-memory:
	mkdir -p $(OUT)
	cd bench && $(GO) test -run '^$$' -bench 'HeapPerKey|TenMillion' -benchtime 1x -count 1 . | tee ../$(OUT)/memory.txt

fault:
	SLUICE_FAULT=1 $(GO) test -run 'Outage|Policies' -count=1 -v ./redisstore
	SLUICE_FAULT=1 $(GO) test -run 'StartWithoutRedis' -count=1 -v ./server

bench-redis:
	mkdir -p $(OUT)
	cd bench && $(GO) test -run '^$$' -bench 'Redis' -benchtime 5s -count $(COUNT) . | tee ../$(OUT)/redis.txt
	$(TOOL) benchstat -col /impl $(OUT)/redis.txt | tee $(OUT)/redis.benchstat

bench-http:
	mkdir -p $(OUT)
ifdef BASE
	BASE=$(BASE) COUNT=$(COUNT) BENCHTIME=$(BENCHTIME) bench/http-base.sh
else
	cd bench && $(GO) test -run '^$$' -bench 'Middleware' -benchtime $(BENCHTIME) -count $(COUNT) . | tee ../$(OUT)/http.txt
	$(TOOL) benchstat -col /impl $(OUT)/http.txt | tee $(OUT)/http.benchstat
endif

bench-gateway:
	mkdir -p $(OUT)
	BASE=$(BASE) bench/gateway.sh | tee $(OUT)/gateway.txt

bench-rls:
	bench/rls.sh

bench-pace:
	mkdir -p $(OUT)
	cd bench && $(GO) test -run '^$$' -bench 'PacerWait' -benchtime $(BENCHTIME) -count $(COUNT) . | tee ../$(OUT)/pace.txt
	$(TOOL) benchstat -col /impl $(OUT)/pace.txt | tee $(OUT)/pace.benchstat

# Durable queues side by side on the local PostgreSQL, Redis (DB 15, flushed)
# and NATS: River, asynq, JetStream, raw bbolt and sluice's queue.Queue
# backends, DURATION (10s) per row, ROUNDS (3) alternating rounds; IMPL and
# SCENARIO (comma-separated) narrow it. The table also goes to $(OUT)/queue.md.
bench-queue:
	mkdir -p $(OUT)
	psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname = 'sluice_bench'" | grep -q 1 || \
	  psql -h 127.0.0.1 -U postgres -c 'create database sluice_bench'
	cd bench && $(GO) build -o ../$(OUT)/queuebench ./cmd/queuebench
	$(OUT)/queuebench -duration $(or $(DURATION),10s) -rounds $(or $(ROUNDS),3) \
	  $(if $(IMPL),-impl $(IMPL)) $(if $(SCENARIO),-scenario $(SCENARIO)) -out $(OUT)/queue.md

algorithms:
	SLUICE_WRITE_DOCS=1 $(GO) test -count=1 -run 'TestAlgorithmsDocUpToDate$$' ./internal/cli

sim:
	SLUICE_SIM=1 $(GO) test -count=1 -v -run 'TestConfiguredLimit|TestLearnsFrom|TestSeedScenario|TestSimulationMatrix' ./pace | grep -E '^(=== RUN|--- |ok|FAIL)|sim_test|matrix_test'

soak:
	SLUICE_CRASH_TRIALS=1000 $(GO) test -count=1 -timeout 60m -run 'TestKill9$$' -v ./boltqueue | grep -E '^(--- |ok|FAIL)|crash_test'
	SLUICE_FLEET_INJECTIONS=50 $(GO) test -count=1 -timeout 60m -run 'TestFleet' -v ./lease | grep -E '^(--- |ok|FAIL)|fleet_test'

bench-fleet:
	SLUICE_FLEET_MODES=1 $(GO) test -count=1 -timeout 20m -run 'TestFleetModes|TestFleetSteady|TestFleetUneven|TestFleetKilled|TestFleetRegional' -v ./lease | grep -E '^(--- |ok|FAIL)|fleet_test'

bench-relay-memory:
	SLUICE_MEMORY=1 $(GO) test -count=1 -timeout 20m -run 'TestMemoryIndependentOfBacklog' -v ./relay | grep -E '^(--- |ok|FAIL)|memory_test'

bench-queue-memory:
	SLUICE_MEMORY=1 $(GO) test -count=1 -timeout 20m -run 'TestMemoryIndependentOfBacklog' -v ./boltqueue | grep -E '^(--- |ok|FAIL)|memory_test'
