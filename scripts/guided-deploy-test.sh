#!/usr/bin/env bash
# `sam deploy --guided` with every prompt answered by pressing Enter must get to the
# change set: no "has no authentication. Is this okay? [y/N]" question (whose default
# answer aborts with "Security Constraints Not Satisfied!"), a default for every
# parameter, the architecture samconfig.toml gives the build, every function packaged,
# and answers saved that keep build and deploy on one architecture.
#
# No AWS account is needed: SAM talks to a local moto server (CloudFormation and S3) with
# fake credentials. Its managed stack (the deployment bucket) is created in moto first,
# as SAM would find it in an account it has deployed to before. The run goes through the
# prompts, saves the answers, uploads every function's package and the template to the
# bucket and calls CreateChangeSet, where it stops: moto cannot read the template back
# from the URL SAM gives it, and moto does not run the Serverless transform anyway, so
# nothing past CreateChangeSet says anything about AWS. It runs on a copy of the
# repository's template (where `sam build` puts it, with an empty code directory) and of
# samconfig.toml, so nothing here is changed.
#
# Usage: scripts/guided-deploy-test.sh [template]   (default infra/template.yaml)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
template=${1:-infra/template.yaml}
venv=${SAM_VENV:-.local/sam-venv}
moto_venv=${MOTO_CFN_VENV:-.local/moto-cfn}
pinned() { sed -n "s/^$1==//p" infra/deploy-tools.txt; }  # the version infra/deploy-tools.txt pins
sam_version=${SAM_CLI_VERSION:-$(pinned aws-sam-cli)}
moto_version=${MOTO_VERSION:-5.2.5}
if [[ ! -x $venv/bin/sam || $("$venv/bin/sam" --version 2>/dev/null) != *" $sam_version" ]]; then
    echo "==> installing aws-sam-cli $sam_version into $venv"
    python3 -m venv --clear "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "aws-sam-cli==$sam_version"
fi
if [[ ! -x $moto_venv/bin/moto_server ]]; then
    echo "==> installing moto $moto_version (CloudFormation, S3) into $moto_venv"
    python3 -m venv --clear "$moto_venv"
    "$moto_venv/bin/pip" install --quiet --disable-pip-version-check \
        "moto[server,cloudformation,s3]==$moto_version"
fi

work=$(mktemp -d)
moto_pid=
cleanup() {
    [[ -n $moto_pid ]] && kill "$moto_pid" 2>/dev/null
    [[ -n ${KEEP_LOG:-} ]] && cp "$work/guided.log" "$KEEP_LOG"
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/.aws-sam/build"
cp "$template" "$work/.aws-sam/build/template.yaml"
# Each function's CodeUri (relative to the template), as empty directories to package.
sed -n 's/^ *CodeUri: *\([^ ]*\) *$/\1/p' "$template" | sort -u | while read -r dir; do
    mkdir -p "$work/.aws-sam/build/$dir"
done
cp samconfig.toml "$work/samconfig.toml"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$moto_venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto_pid=$!
export AWS_ACCESS_KEY_ID=AKIAFAKEFAKEFAKEFAKE AWS_SECRET_ACCESS_KEY=fake \
    AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null \
    AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_ENDPOINT_URL=http://127.0.0.1:$port
# Until moto answers: its start-up (importing flask and moto) takes seconds of CPU, and
# CI runs this at nice 19 beside the tests, where 10 s were once not enough; a bound
# only for a moto that never comes up, which the check then reports.
python3 - "$port" "$moto_pid" <<'PY'
import os, socket, sys, time
deadline = time.monotonic() + 300
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        try:
            os.kill(int(sys.argv[2]), 0)
        except OSError:
            sys.exit("guided-deploy-test: moto exited during start-up")
        if time.monotonic() > deadline:
            sys.exit("guided-deploy-test: moto did not answer within 300 s")
        time.sleep(0.1)
PY
# SAM's managed stack, created as `sam deploy` creates it (moto leaves the Outputs of a
# stack created from a change set empty, so it is created directly).
"$venv/bin/python" - <<'PY'
import boto3
from samcli.lib.bootstrap import bootstrap

boto3.client("cloudformation").create_stack(
    StackName="aws-sam-cli-managed-default",
    TemplateBody=bootstrap._get_stack_template(),
    Tags=[{"Key": "ManagedStackSource", "Value": "AwsSamCli"}],
)
PY

echo "==> sam deploy --guided, Enter at every prompt (moto on port $port, fake credentials)"
set +e
(
    cd "$work"
    env -i PATH="$PATH" HOME="$work" SAM_CLI_TELEMETRY=0 \
        AWS_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" AWS_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY" \
        AWS_DEFAULT_REGION="$AWS_DEFAULT_REGION" AWS_CONFIG_FILE=/dev/null \
        AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_ENDPOINT_URL="$AWS_ENDPOINT_URL" \
        timeout 300 "$OLDPWD/$venv/bin/sam" deploy --guided < <(yes "")
) >"$work/guided.log" 2>&1
status=$?
set -e

log=$work/guided.log
failed=()
grep -q "has no authentication" "$log" && failed+=("SAM asked about routes without authentication")
grep -q "Security Constraints Not Satisfied" "$log" && failed+=("the guided deploy aborted: Security Constraints Not Satisfied!")
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
functions=$(grep -c "Type: AWS::Serverless::Function" "$template")
packaged=$(grep -cE "Uploading to ojs-serverless/[0-9a-f]+ |File with same data already exists" "$log" || true)
((packaged >= functions)) || failed+=("$packaged of $functions functions packaged")
grep -q "Initiating deployment" "$log" || failed+=("the deploy did not reach the change set")
grep -qE "Waiting for changeset to be created|Failed to create changeset" "$log" ||
    failed+=("CreateChangeSet was not called")
# What the guided deploy saved keeps build and deploy on one architecture.
saved=$(python3 scripts/check-samconfig.py "$work/samconfig.toml" "$template" 2>&1) ||
    failed+=("the saved samconfig.toml: $saved")
grep -q 'parameter_overrides = "Architecture=\\"arm64\\"' "$work/samconfig.toml" ||
    failed+=("the guided deploy did not save its answers to samconfig.toml")
if [[ $status -eq 0 ]]; then
    failed+=("sam deploy succeeded against moto: the test no longer stops where it should")
fi
if ((${#failed[@]})); then
    sed 's/^/    | /' "$log" | tail -n 60 >&2
    printf 'guided-deploy-test: %s\n' "${failed[@]}" >&2
    exit 1
fi
prompts=$(grep -o "\[[^]]*\]:" "$log" | wc -l)
echo "    $prompts prompts answered with their defaults, no authentication question;"
echo "    $functions functions packaged and uploaded, answers saved (${saved#"${saved%%[![:space:]]*}"});"
echo "    stopped at CreateChangeSet: $(grep -m1 -E "Failed to create changeset|Waiting for changeset" "$log" | cut -c1-110)"
echo "guided-deploy-test: ok"
