#!/usr/bin/env bash
# `sam deploy --guided` with every prompt answered by pressing Enter must get past the
# prompts: no "has no authentication. Is this okay? [y/N]" question (whose default
# answer aborts with "Security Constraints Not Satisfied!"), a default for every
# parameter, and the architecture samconfig.toml gives the build.
#
# No AWS account is needed to reach the prompts: the run uses fake credentials and an
# endpoint that refuses connections, so it stops right after them, where SAM looks for
# its managed S3 bucket. It runs on a copy of the repository's template (placed where
# `sam build` puts it) and samconfig.toml, so nothing here is changed.
#
# Usage: scripts/guided-deploy-test.sh [template]   (default infra/template.yaml)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
template=${1:-infra/template.yaml}
venv=${SAM_VENV:-.local/sam-venv}
pinned() { sed -n "s/^$1==//p" infra/deploy-tools.txt; }  # the version infra/deploy-tools.txt pins
sam_version=${SAM_CLI_VERSION:-$(pinned aws-sam-cli)}
if [[ ! -x $venv/bin/sam || $("$venv/bin/sam" --version 2>/dev/null) != *" $sam_version" ]]; then
    echo "==> installing aws-sam-cli $sam_version into $venv"
    python3 -m venv --clear "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "aws-sam-cli==$sam_version"
fi

work=$(mktemp -d)
trap '[[ -n ${KEEP_LOG:-} ]] && cp "$work/guided.log" "$KEEP_LOG"; rm -rf "$work"' EXIT
mkdir -p "$work/.aws-sam/build"
cp "$template" "$work/.aws-sam/build/template.yaml"
cp samconfig.toml "$work/samconfig.toml"

echo "==> sam deploy --guided, Enter at every prompt (fake credentials, no endpoint)"
set +e
(
    cd "$work"
    # 127.0.0.1:9 (discard) refuses connections: SAM's first AWS call fails at once.
    env -i PATH="$PATH" HOME="$work" SAM_CLI_TELEMETRY=0 \
        AWS_ACCESS_KEY_ID=AKIAFAKEFAKEFAKEFAKE AWS_SECRET_ACCESS_KEY=fake \
        AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null \
        AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_ENDPOINT_URL=http://127.0.0.1:9 \
        AWS_MAX_ATTEMPTS=1 \
        timeout 120 "$OLDPWD/$venv/bin/sam" deploy --guided < <(yes "")
) >"$work/guided.log" 2>&1
status=$?
set -e

log=$work/guided.log
failed=()
grep -q "has no authentication" "$log" && failed+=("SAM asked about routes without authentication")
grep -q "Security Constraints Not Satisfied" "$log" && failed+=("the guided deploy aborted: Security Constraints Not Satisfied!")
grep -q "Looking for resources needed for deployment" "$log" ||
    failed+=("the guided deploy did not get past its prompts")
grep -q "Parameter Architecture \[arm64\]" "$log" ||
    failed+=("the Architecture prompt does not default to samconfig's global arm64")
# Every template parameter is asked, with a default.
for p in $(python3 - "$template" <<'PY'
import re, sys
src = open(sys.argv[1], encoding="utf-8").read()
params = src.split("\nParameters:\n", 1)[1].split("\n\n", 1)[0]
print(" ".join(re.findall(r"^  (\w+):$", params, re.M)))
PY
); do
    grep -q "Parameter $p \[" "$log" || failed+=("no prompt with a default for parameter $p")
done
if [[ $status -eq 0 ]]; then
    failed+=("sam deploy succeeded without AWS: the test no longer stops where it should")
fi
if ((${#failed[@]})); then
    sed 's/^/    | /' "$log" | tail -n 60 >&2
    printf 'guided-deploy-test: %s\n' "${failed[@]}" >&2
    exit 1
fi
prompts=$(grep -o "\[[^]]*\]:" "$log" | wc -l)
echo "    $prompts prompts answered with their defaults; no authentication question;"
echo "    stopped where SAM first calls AWS: $(grep -m1 -iE "error|could not|unable" "$log" | cut -c1-120)"
echo "guided-deploy-test: ok"
