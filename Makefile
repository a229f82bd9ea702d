# Tidemark's commands. `make test` and `make demo` do all set-up on a fresh machine (see README.md).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
STACK := bash deploy/local/stack.sh
# Go test flags; CI runs everything with the race detector.
GOTESTFLAGS ?= -race -count=1 -timeout 25m

.PHONY: help up down env install test check vet unit demo screenshots plugin stress bench-latency bench-lag bench-lag-large bench-collector bench-cardinality bench-plugin bench-scale

help:
	@echo "make test     start real Kafka (with its SASL_SSL, OAUTHBEARER and mTLS listeners) + ClickHouse + Jaeger"
	@echo "              if needed, vet, run all tests, stop what it started"
	@echo "make demo     run Tidemark on real traffic between hosts with skewed clocks and print the report"
	@echo "make up|down  start / stop the local stack (3 Kafka brokers with the secure listeners, the OIDC issuer,"
	@echo "              ClickHouse with its TLS port); 'make env' prints its env; every command above reuses it"
	@echo "make screenshots  a short load on the local stack, then every shipped dashboard drawn from the plugin backend's"
	@echo "              frames with Grafana's UI components in headless Chromium, into docs/screenshots/ (no Grafana server)"
	@echo "make plugin   build the Grafana plugin into plugin/dist"
	@echo "make stress   repeat the tests (-race, -count, -cpu) to find flaky ones; prints failures per test (docs/testing.md)"
	@echo "make bench-latency|bench-lag|bench-lag-large|bench-collector|bench-cardinality|bench-plugin|bench-scale   benchmarks (ratios against same-run baselines)"

install:
	$(STACK) install

up:
	@$(STACK) up --brokers $${TIDEMARK_BROKERS:-3}

down:
	@$(STACK) down

env:
	@$(STACK) env

# test: the stack is started only if it is not already running, and only what this run started is stopped.
# Jaeger is the real trace backend of the tracing integration test (built once per machine: ~10 CPU-minutes from empty Go caches).
# The stack always has the secure listeners: the secure-connection tests (SCRAM, OAUTHBEARER, mTLS, ClickHouse TLS) run
# on real listeners, and a stack `make demo` left running serves `make test` as it is.
test:
	$(STACK) with --jaeger -- $(MAKE) --no-print-directory check

# check: everything the tests need besides the servers, then the tests (expects the stack's env to be set).
check: vet
	$(GO) test $(GOTESTFLAGS) ./...
	bash plugin/test.sh

vet: node-deps
	$(GO) vet ./...

# Node packages some Go tests run (chDB executes the modern ClickHouse DDL); installed from lockfiles, idempotently.
.PHONY: node-deps
node-deps:
	@for d in internal/store/chdbtest; do \
	  if [ -f $$d/package-lock.json ]; then \
	    sum=$$(sha256sum $$d/package-lock.json | cut -c1-64); \
	    if [ "$$(cat $$d/node_modules/.tidemark-lock 2>/dev/null)" != "$$sum" ]; then \
	      (cd $$d && npm install --no-save --no-audit --no-fund --loglevel=error) && echo "$$sum" > $$d/node_modules/.tidemark-lock; \
	    fi; \
	  fi; \
	done

demo:
	bash deploy/demo/run.sh

# stress: not part of test. Unit tests -race -count=20 -cpu 1,2,4 without servers, then the integration tests
# -count=3 against the stack; STRESS_COUNT, STRESS_CPU, STRESS_INTEGRATION_COUNT, STRESS_PHASES, STRESS_RUN and
# STRESS_PKGS tune it (see .ci/stress).
stress:
	bash .ci/stress

# screenshots: docs/screenshots/dashboard-*.png from a 75 s load (SHOTS_SECONDS); deploy/screenshots/run.sh says how.
screenshots:
	$(STACK) with -- env SHOTS_SECONDS=$${SHOTS_SECONDS:-75} bash deploy/screenshots/run.sh

plugin:
	bash plugin/build.sh

bench-latency:
	$(GO) run ./cmd/bench-latency

# bench-lag: the shipped `tidemark run` at 100k group-partitions (5,000 groups x 20) under a live workload, kminion and
# kafka_exporter (built by cmd/bench-lag/peers.sh) alternated with it over 3 rounds, on 3 brokers the bench starts for
# itself (JMX on: the brokers count the requests); bench-lag-large at 500k (25,000 x 20). BENCH_LAG_ARGS adds flags
# (e.g. BENCH_LAG_ARGS='-groups 500' for a small run).
bench-lag:
	bash deploy/local/kafka.sh install
	$(GO) run ./cmd/bench-lag $(BENCH_LAG_ARGS)

bench-lag-large:
	bash deploy/local/kafka.sh install
	$(GO) run ./cmd/bench-lag -groups 25000 $(BENCH_LAG_ARGS)

# bench-collector: BENCH_ROUNDS=N alternated rounds (default 5); BENCH_REPLICAS=2 adds one and two `tidemark run`
# processes on the same receipts (docs/performance.md).
bench-collector:
	$(STACK) with -- $(GO) run ./cmd/bench-collector $(if $(BENCH_REPLICAS),-replicas $(BENCH_REPLICAS))

# bench-scale: two `tidemark run` replicas, load, one SIGKILLed mid-run; counts from ClickHouse and Kafka's tools
# (docs/performance.md). One broker: the replicas, the load and ClickHouse already share the two cores.
bench-scale:
	$(STACK) with --brokers 1 -- $(GO) run ./cmd/bench-scale

bench-cardinality:
	$(STACK) with -- $(GO) run ./cmd/bench-cardinality

bench-plugin:
	$(STACK) with -- $(GO) run ./cmd/bench-plugin
