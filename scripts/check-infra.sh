#!/usr/bin/env bash
# Offline checks of the deployment (CI runs this after `make test`):
#   1. scripts/validate-template.sh on infra/template.yaml must pass;
#   2. the same validation on copies with planted errors must FAIL (an unknown
#      architecture value, a malformed schedule expression), proving the lint step bites;
#   3. scripts/sam-build.sh --fast: `sam build` of every function for x86_64.
# Usage: scripts/check-infra.sh [--no-build]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/validate-template.sh infra/template.yaml

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plant() { # name, python replacement expression
    local name=$1 from=$2 to=$3
    python3 - "$from" "$to" infra/template.yaml "$work/$name.yaml" <<'PY'
import sys
src = open(sys.argv[3], encoding="utf-8").read()
if sys.argv[1] not in src:
    sys.exit(f"plant: {sys.argv[1]!r} not found in the template")
open(sys.argv[4], "w", encoding="utf-8").write(src.replace(sys.argv[1], sys.argv[2], 1))
PY
    if scripts/validate-template.sh "$work/$name.yaml" >"$work/$name.log" 2>&1; then
        echo "check-infra: the planted error '$name' passed validation" >&2
        exit 1
    fi
    echo "==> planted error '$name' rejected, as it must be:"
    grep -E "^E[0-9]|Error|error" "$work/$name.log" | head -n 2 | cut -c1-150 | sed "s/^/    /"
}
plant unknown-architecture "      - !Ref Architecture" "      - arm65"
plant unknown-runtime "Runtime: provided.al2023" "Runtime: provided.al2099"

if [[ ${1:-} != --no-build ]]; then
    scripts/sam-build.sh --fast
fi
echo "check-infra: ok"
