# Developer entry points. The logic lives in scripts/ (Make handles signals badly).
#   make dev          the API on 127.0.0.1:$(OJS_PORT) against local DynamoDB/SQS
#                     (OJS_STRICT_DDB=on: DynamoDB through the AWS-strict test layer)
#   make test         every test, against local DynamoDB/SQS (started if needed), the
#                     dashboard in headless Chromium included; DynamoDB behind the
#                     AWS-strict layer's full mode (OJS_STRICT_DDB=rules: its rules alone)
#   make dashboard    builds the OJS dashboard (npm) and serves it on
#                     http://127.0.0.1:8090/ojs/admin/ against `make dev` (OJS_URL=... and
#                     OJS_ADMIN_KEY=... for a deployed stack; see README, "Dashboard")
#   make test-loaded  make test 3 times in a row beside a CPU hog (OJS_LOADED_RUNS=N,
#                     OJS_LOADED_HOGS=N): tests must not depend on the machine's speed
#   make fmt | lint | build
#   make stress       full stress test: 20,000 jobs, 32 workers, 8 producers (OJS_STRESS_JOBS=N)
#   make fuzz         10 minutes each of envelope, decoder and HTTP fuzzing (OJS_FUZZ_SECONDS=N);
#                     CI runs 1,000 envelope cases and 20 s of HTTP fuzzing
#   make bench        benchmarks (capacity, cost, throughput, cold start, CPU) -> bench/results.json
#   make infra        validate the SAM template (and planted errors), sam build x86_64
#   make smoke URL=https://... KEY=ojs_...   lifecycle smoke test of a deployment
#   make clean-local  stop local AWS and remove .local/
# Set AWS_ENDPOINT_URL_DYNAMODB (or AWS_ENDPOINT_URL) to use another endpoint instead of
# starting DynamoDB Local and moto.

SHELL := /bin/bash
.DEFAULT_GOAL := help

OJS_PORT ?= 8080
OJS_TABLE ?= ojs-local
export OJS_PORT OJS_TABLE

# Extra arguments for cargo test, e.g. make test TEST_ARGS='-p ojs-core'
TEST_ARGS ?=

# Extra arguments for ojs-bench, e.g. make bench BENCH_ARGS=--quick
BENCH_ARGS ?=

.PHONY: help dev test test-loaded dashboard bench fmt lint build infra smoke clean-local local-aws-start local-aws-stop local-aws-status

help:
	@sed -n 's/^#   //p' Makefile

dev:
	@bash scripts/dev.sh

test:
	@bash scripts/test.sh $(TEST_ARGS)

test-loaded:
	@bash scripts/test-loaded.sh

dashboard:
	@bash scripts/dashboard.sh run

stress:
	@bash scripts/local-aws.sh install
	@bash scripts/local-aws.sh start
	OJS_STRESS_JOBS=$${OJS_STRESS_JOBS:-20000} cargo test -p ojs-tests --test stress -- --nocapture

fuzz:
	OJS_FUZZ_SECONDS=$${OJS_FUZZ_SECONDS:-600} cargo test -p ojs-core --test fuzz_envelope -- --nocapture --test-threads 4
	OJS_FUZZ_SECONDS=$${OJS_FUZZ_SECONDS:-600} cargo test -p ojs-proto --test fuzz_decoder -- --nocapture
	@bash scripts/local-aws.sh install
	@bash scripts/local-aws.sh start
	OJS_FUZZ_SECONDS=$${OJS_FUZZ_SECONDS:-600} cargo test -p ojs-tests --test integration fuzz_http -- --nocapture

bench:
	@bash bench/run.sh $(BENCH_ARGS)

fmt:
	cargo fmt --all -- --check

lint:
	cargo clippy --workspace --all-targets -- -D warnings

build:
	cargo build --workspace

local-aws-start:
	@bash scripts/local-aws.sh install
	@bash scripts/local-aws.sh start

local-aws-stop:
	@bash scripts/local-aws.sh stop

local-aws-status:
	@bash scripts/local-aws.sh status

clean-local:
	@bash scripts/local-aws.sh stop
	rm -rf .local

infra:
	@bash scripts/check-infra.sh

smoke:
	OJS_SMOKE_URL="$(URL)" OJS_SMOKE_API_KEY="$(KEY)" $(if $(ORIGIN),OJS_SMOKE_ORIGIN="$(ORIGIN)") cargo test -p ojs-tests --test integration smoke:: -- --nocapture
