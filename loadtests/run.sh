#!/usr/bin/env bash
# A headless Locust run of bounded length against sealflow; exits non-zero on any failure.
#
#   loadtests/run.sh [--users 32] [--spawn-rate 8] [--duration 60s] [--out loadtests/out]
#                    [--url URL]   (with SEALFLOW_TOKEN; otherwise a server is started here)
#
# Writes <out>/locust_stats.csv (and the other Locust CSVs), <out>/report.html and, for a
# server it started, <out>/rss.csv (the server's resident memory once a second).
set -euo pipefail
cd "$(dirname "$0")/.."

users=32 rate=8 duration=60s out=loadtests/out url=""
while (($#)); do
    case "$1" in
        --users) users=$2; shift 2 ;;
        --spawn-rate) rate=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --url) url=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

python=${PYTHON:-.venv/bin/python}
sealflow=$(dirname "$python")/sealflow
locust=$(dirname "$python")/locust
mkdir -p "$out"
server_pid="" sampler_pid="" work=""
cleanup() {
    [[ -n $sampler_pid ]] && kill "$sampler_pid" 2>/dev/null || true
    if [[ -n $server_pid ]]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    [[ -n $work ]] && rm -rf "$work"
    return 0
}
trap cleanup EXIT

if [[ -z $url ]]; then
    work=$(mktemp -d)
    port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url="http://127.0.0.1:$port"
    "$sealflow" serve --port "$port" --data-dir "$work/data" >"$work/serve.out" 2>"$out/server.log" &
    server_pid=$!
    for _ in $(seq 100); do
        curl -sf "$url/readyz" >/dev/null 2>&1 && break
        kill -0 "$server_pid" 2>/dev/null || { echo "the server did not start; see $out/server.log" >&2; exit 1; }
        sleep 0.1
    done
    SEALFLOW_TOKEN=$("$sealflow" tokens create --data-dir "$work/data" \
        --scope encrypt:default --scope decrypt:default --label loadtest 2>/dev/null)
    export SEALFLOW_TOKEN
    echo "seconds,rss_bytes" >"$out/rss.csv"
    (
        start=$(date +%s)
        while kill -0 "$server_pid" 2>/dev/null; do
            rss=$(awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$server_pid/status" 2>/dev/null || true)
            [[ -n $rss ]] && echo "$(($(date +%s) - start)),$rss" >>"$out/rss.csv"
            sleep 1
        done
    ) &
    sampler_pid=$!
elif [[ -z ${SEALFLOW_TOKEN:-} ]]; then
    echo "--url needs SEALFLOW_TOKEN (a token with encrypt and decrypt on the load key)" >&2
    exit 2
fi

# Locust exits 1 when any request failed: a wrong plaintext, a non-200 status (5xx included)
# or a cut-off body are all failures in locustfile.py.
"$locust" -f loadtests/locustfile.py --headless --host "$url" \
    --users "$users" --spawn-rate "$rate" --run-time "$duration" --stop-timeout 30 \
    --csv "$out/locust" --html "$out/report.html" --only-summary
