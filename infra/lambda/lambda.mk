# `sam build` of every function of infra/template.yaml (BuildMethod: makefile), included
# by infra/lambda/<arch>/Makefile, which sets ARCH. Each function's Metadata names
#   ContextPath: !Sub lambda/${Architecture}    (this Makefile, for the stack's Architecture)
#   BuildProperties: Binary: <bin>              (the cargo bin it runs)
# and SAM runs `make build-<LogicalId>` once per function with ARTIFACTS_DIR set.
#
# Every target runs the same ONE `cargo lambda build` of every Binary the template names,
# then copies its own bin's bootstrap: the first target compiles the workspace once, the
# others find cargo's build fresh (about a second each) and only copy. One invocation
# builds the bins with one feature resolution, so shared crates compile once (per-bin
# builds, as BuildMethod rust-cargolambda runs them, re-resolve features and relink per
# function: about 17 minutes of CI on 2 cores, against one build here).
#
# OJS_PREBUILT_BINS=<dir> (CI: scripts/sam-build.sh --prebuilt <dir>) packages the bins a
# cargo build already made there instead (CI's test build, which links every function's
# bin anyway): the same targets, copies and checks, without a second compile of the
# workspace for another target and profile. A user deploying never sets it.
#
# The build always runs in the repository (located from this file), whatever directory
# SAM runs make in, and honours CARGO_TARGET_DIR and the CARGO_PROFILE_RELEASE_* overrides
# of scripts/sam-build.sh --fast. The LogicalId names the bin: JobsFunction -> jobs,
# DeadLetterFunction -> dead-letter (scripts/check-template.py checks every function).

ifndef ARCH
$(error ARCH is not set: run make through infra/lambda/arm64 or infra/lambda/x86_64)
endif
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))../..)
TRIPLE_arm64 := aarch64-unknown-linux-gnu
TRIPLE_x86_64 := x86_64-unknown-linux-gnu
TRIPLE := $(TRIPLE_$(ARCH))
ifeq ($(TRIPLE),)
$(error unknown ARCH '$(ARCH)' (arm64 or x86_64))
endif
# Every bin the template deploys, from its `Binary: <bin>` lines.
BINS := $(shell sed -n 's/^ *Binary: *\([A-Za-z0-9_-]*\) *$$/\1/p' '$(ROOT)/infra/template.yaml')
# The bins land in <target dir>/lambda/<arch>/<bin>/bootstrap (one directory per
# architecture: a build for the other one never leaves a stale bootstrap here).
LAMBDA_DIR = $${CARGO_TARGET_DIR:-target}/lambda/$(ARCH)

# One build of every bin (what scripts/sam-build.sh runs alone first, to time it). With
# OJS_PREBUILT_BINS it only checks that every bin is there, and each target copies its
# own from there.
ifdef OJS_PREBUILT_BINS
BUILD_BINS = cd '$(ROOT)' && for bin in $(BINS); do test -x "$(OJS_PREBUILT_BINS)/$$bin" \
    || { echo "lambda.mk: $(OJS_PREBUILT_BINS)/$$bin is missing (OJS_PREBUILT_BINS)" >&2; exit 1; }; done
BIN_PATH = $(OJS_PREBUILT_BINS)/$$bin
else
BUILD_BINS = cd '$(ROOT)' && cargo lambda build --release --target $(TRIPLE) \
    --lambda-dir "$(LAMBDA_DIR)" $(addprefix --bin ,$(BINS))
BIN_PATH = $(LAMBDA_DIR)/$$bin/bootstrap
endif

.PHONY: lambda-bins
lambda-bins:
	$(BUILD_BINS)

build-%:
	@bin=$$(echo '$*' | sed -e 's/Function$$//' -e 's/\([a-z0-9]\)\([A-Z]\)/\1-\2/g' | tr 'A-Z' 'a-z'); \
	case ' $(BINS) ' in *" $$bin "*) ;; \
	    *) echo "lambda.mk: $* would package bin '$$bin', which no 'Binary:' of infra/template.yaml names" >&2; exit 1;; \
	esac; \
	test -n '$(ARTIFACTS_DIR)' || { echo "lambda.mk: ARTIFACTS_DIR is not set (sam build sets it)" >&2; exit 1; }
	$(BUILD_BINS)
	@bin=$$(echo '$*' | sed -e 's/Function$$//' -e 's/\([a-z0-9]\)\([A-Z]\)/\1-\2/g' | tr 'A-Z' 'a-z'); \
	cd '$(ROOT)' && cp "$(BIN_PATH)" '$(ARTIFACTS_DIR)/bootstrap'
