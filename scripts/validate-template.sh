#!/usr/bin/env bash
# Validate infra/template.yaml offline, in two passes:
#   1. `sam validate --lint`: cfn-lint on the SAM template as written.
#   2. Translate the SAM template to plain CloudFormation with samtranslator and run
#      cfn-lint on the result. Pass 1 does not look inside SAM resources (a bad
#      Architectures value or runtime slips through); pass 2 does.
#   3. scripts/check-template.py on the translated template: what cfn-lint cannot see
#      (schedule expressions, CORS at the gateway, the authorizer on every route, alarms,
#      the dashboard, API key partition IAM).
# Needs python3 and PyPI on first run (installs aws-sam-cli into .local/sam-venv).
# No AWS credentials or endpoint are used.
#
# Usage: scripts/validate-template.sh [template] [--checks-only]   (default infra/template.yaml)
#   --checks-only: steps 2 and 3 without cfn-lint (for an error only check-template.py can
#   see: cfn-lint's ~10 s of start-up and rules prove nothing there; scripts/plant-errors.py
#   runs the same steps in process on check-infra.sh's planted errors).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
template=${1:-infra/template.yaml}
checks_only=false
if [[ ${2:-} == --checks-only ]]; then checks_only=true; fi
venv=${SAM_VENV:-.local/sam-venv}
pinned() { sed -n "s/^$1==//p" infra/deploy-tools.txt; }  # the version infra/deploy-tools.txt pins
sam_version=${SAM_CLI_VERSION:-$(pinned aws-sam-cli)}

if [[ ! -x $venv/bin/sam || $("$venv/bin/sam" --version 2>/dev/null) != *" $sam_version" || ! -x $venv/bin/cfn-lint ]]; then
    echo "==> installing aws-sam-cli $sam_version into $venv"
    python3 -m venv --clear "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "aws-sam-cli==$sam_version"
fi

export SAM_CLI_TELEMETRY=0
# samtranslator fills AWS::Region/AWS::Partition from the environment; no call is made.
export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1

if ! $checks_only; then
    echo "==> sam validate --lint -t $template"
    "$venv/bin/sam" validate --lint -t "$template"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
translated=$work/translated.json

echo "==> samtranslator: $template -> CloudFormation"
"$venv/bin/python" - "$template" "$translated" <<'PY'
import json
import sys

from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class OfflinePolicyLoader:
    """Stands in for the IAM ListPolicies call; the template names no managed policy."""

    def load(self):
        return {}


src, dst = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    sam = yaml_parse(f.read())

# `sam package` would upload each local CodeUri and put an S3 URI in its place.
for resource in sam.get("Resources", {}).values():
    props = resource.get("Properties") or {}
    if resource.get("Type") == "AWS::Serverless::Function" and isinstance(
        props.get("CodeUri"), str
    ):
        props["CodeUri"] = "s3://offline-validation/code.zip"

try:
    cfn = transform(sam, {}, OfflinePolicyLoader())
except InvalidDocumentException as e:
    for cause in e.causes:
        print(f"    {cause.message}", file=sys.stderr)
    sys.exit(1)
with open(dst, "w", encoding="utf-8") as f:
    json.dump(cfn, f, indent=2)
print(f"    {len(cfn.get('Resources', {}))} CloudFormation resources")
PY

if ! $checks_only; then
    echo "==> cfn-lint (translated template)"
    "$venv/bin/cfn-lint" --regions us-east-1 -- "$translated"
fi

echo "==> deployment checks (scripts/check-template.py)"
"$venv/bin/python" scripts/check-template.py "$template" "$translated" .

echo "OK: $template"
