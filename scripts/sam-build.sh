#!/usr/bin/env bash
# `sam build` of infra/template.yaml for x86_64 (the only Rust target on these machines;
# arm64 stays the template default for AWS), with cargo-lambda, as `sam deploy` needs it.
# Installs aws-sam-cli, cargo-lambda and ziglang (versions: infra/deploy-tools.txt) into
# .local/sam-venv on first run.
#
#   scripts/sam-build.sh          optimised build, as deployed (LTO; slow on 2 cores)
#   scripts/sam-build.sh --fast   same pipeline, unoptimised code (CI: proves every
#                                 function builds and packages, in a fraction of the time)
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
if [[ ! -x $venv/bin/cargo-lambda ]]; then
    echo "==> installing cargo-lambda $cargo_lambda_version into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "cargo-lambda==$cargo_lambda_version" "ziglang==$ziglang_version"
fi
# cargo-lambda finds zig through `python3 -m ziglang`: the venv's python must come first.
export PATH="$PWD/$venv/bin:$PATH"
export SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}

if [[ ${1:-} == --fast ]]; then
    export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_INCREMENTAL=false
fi

t0=$SECONDS
sam build --template-file infra/template.yaml --build-dir .aws-sam/build \
    --parameter-overrides Architecture=x86_64
echo "==> built in $((SECONDS - t0)) s:"
for f in .aws-sam/build/*/bootstrap; do
    printf '    %-32s %8d bytes\n' "$(basename "$(dirname "$f")")" "$(stat -c %s "$f")"
done
