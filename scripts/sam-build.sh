#!/usr/bin/env bash
# `sam build` of infra/template.yaml for x86_64 (the only Rust target on these machines;
# arm64 stays the template default for AWS), with cargo-lambda, as `sam deploy` needs it.
# Installs aws-sam-cli, cargo-lambda and ziglang (versions: infra/deploy-tools.txt) into
# .local/sam-venv on first run (and make, with apt-get, where it is missing).
#
# The same two steps `sam build` runs through infra/lambda/x86_64/Makefile, timed apart:
# one `cargo lambda build` of every function's bin (the Makefile's lambda-bins target),
# then `sam build`, whose build-<Function> targets find that build fresh and only copy
# each bootstrap. Then every function must have a bootstrap for x86_64.
#
#   scripts/sam-build.sh          optimised build, as deployed (LTO; slow on 2 cores)
#   scripts/sam-build.sh --fast   same pipeline, unoptimised code (proves every function
#                                 builds and packages, in a fraction of the time)
#   scripts/sam-build.sh --prebuilt DIR
#                                 CI: `sam build` packages the bins a cargo build already
#                                 left in DIR (the tests' build of every function, x86_64
#                                 Linux like the Lambda target) through the same Makefile
#                                 (OJS_PREBUILT_BINS): the template, its build method and
#                                 every function's packaging are checked without compiling
#                                 the workspace a second time (about 430 CPU seconds)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${SAM_VENV:-.local/sam-venv}
pinned() { sed -n "s/^$1==//p" infra/deploy-tools.txt; }  # the version infra/deploy-tools.txt pins
sam_version=${SAM_CLI_VERSION:-$(pinned aws-sam-cli)}
cargo_lambda_version=${CARGO_LAMBDA_VERSION:-$(pinned cargo-lambda)}
ziglang_version=${ZIGLANG_VERSION:-$(pinned ziglang)}

if [[ ! -x $venv/bin/sam || $("$venv/bin/sam" --version 2>/dev/null) != *" $sam_version" ]]; then
    echo "==> installing aws-sam-cli $sam_version into $venv"
    python3 -m venv --clear "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "aws-sam-cli==$sam_version"
fi
prebuilt=""
if [[ ${1:-} == --prebuilt ]]; then
    [[ -d ${2:-} ]] || { echo "sam-build: --prebuilt needs the directory of the built bins" >&2; exit 2; }
    prebuilt=$(cd "$2" && pwd)
fi
if [[ -z $prebuilt && ! -x $venv/bin/cargo-lambda ]]; then
    echo "==> installing cargo-lambda $cargo_lambda_version into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "cargo-lambda==$cargo_lambda_version" "ziglang==$ziglang_version"
fi
if ! command -v make >/dev/null 2>&1; then  # SAM's makefile builder runs make
    command -v apt-get >/dev/null 2>&1 || { echo "sam-build: make is needed" >&2; exit 1; }
    sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    echo "==> installing make (apt-get)"
    "${sudo[@]}" apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends make >/dev/null
fi
# cargo-lambda finds zig through `python3 -m ziglang`: the venv's python must come first.
export PATH="$PWD/$venv/bin:$PATH"
export SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}

if [[ ${1:-} == --fast ]]; then
    export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_INCREMENTAL=false
fi

if [[ -n $prebuilt ]]; then
    export OJS_PREBUILT_BINS=$prebuilt
fi

arch=x86_64
t0=$SECONDS
make --no-print-directory -f "infra/lambda/$arch/Makefile" lambda-bins
t1=$SECONDS
sam build --template-file infra/template.yaml --build-dir .aws-sam/build \
    --parameter-overrides Architecture=$arch
t2=$SECONDS
if [[ -n $prebuilt ]]; then
    echo "==> sam build of the bins in $prebuilt: $((t2 - t0)) s:"
else
    echo "==> sam build: $((t2 - t0)) s (cargo lambda build of every bin $((t1 - t0)) s, then sam build $((t2 - t1)) s):"
fi
functions=$(grep -c "Type: AWS::Serverless::Function" infra/template.yaml)
built=0
for f in .aws-sam/build/*/bootstrap; do
    [[ -f $f ]] || continue
    # ELF e_machine (bytes 18-19, little-endian): 62 x86_64, 183 aarch64.
    machine=$(od -An -tu2 -j18 -N2 "$f" | tr -d ' ')
    [[ $machine == 62 ]] || { echo "sam-build: $f is not an x86_64 executable (e_machine $machine)" >&2; exit 1; }
    built=$((built + 1))
    printf '    %-32s %8d bytes\n' "$(basename "$(dirname "$f")")" "$(stat -c %s "$f")"
done
if ((built != functions)); then
    echo "sam-build: $built bootstraps for $functions functions of infra/template.yaml" >&2
    exit 1
fi
