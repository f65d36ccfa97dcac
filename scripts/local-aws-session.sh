# Sourced by scripts/dev.sh, scripts/test.sh and bench/run.sh: local AWS for the lifetime
# of one command. Run from the repository root.
#
# local_aws_up NAME: if AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL is set, that endpoint
# is used as is; otherwise DynamoDB Local and moto are installed and started (or reused if
# already running) and their environment exported. local_aws_down stops whatever
# local_aws_up started, and nothing else; it is safe to call more than once.
# local_aws_fresh_ddb_command prints a command that restarts DynamoDB Local empty, or
# nothing when this session did not start it (an endpoint from the environment, or an
# instance someone else runs, is never restarted).

local_aws_started_file=""

local_aws_up() {
    local who="$1"
    if [ -n "${AWS_ENDPOINT_URL_DYNAMODB:-}" ] || [ -n "${AWS_ENDPOINT_URL:-}" ]; then
        echo "$who: using DynamoDB at ${AWS_ENDPOINT_URL_DYNAMODB:-$AWS_ENDPOINT_URL} (from the environment); not starting local AWS" >&2
        return 0
    fi
    scripts/local-aws.sh install
    local_aws_started_file="$(mktemp)"
    OJS_LOCAL_AWS_STARTED_FILE="$local_aws_started_file" scripts/local-aws.sh start
    eval "$(scripts/local-aws.sh env)"
}

local_aws_fresh_ddb_command() {
    if [ -n "$local_aws_started_file" ] && grep -qx ddb "$local_aws_started_file"; then
        echo "scripts/local-aws.sh stop ddb >/dev/null && scripts/local-aws.sh start ddb >/dev/null"
    fi
}

local_aws_down() {
    if [ -n "$local_aws_started_file" ]; then
        if [ -s "$local_aws_started_file" ]; then
            # shellcheck disable=SC2046
            scripts/local-aws.sh stop $(cat "$local_aws_started_file") || true
        fi
        rm -f "$local_aws_started_file"
        local_aws_started_file=""
    fi
}
