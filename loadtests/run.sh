#!/usr/bin/env bash
# A headless Locust run of bounded length against sealflow; exits non-zero on any failure.
#
#   loadtests/run.sh [--users 32] [--spawn-rate 8] [--duration 60s] [--out DIR]
#                    [--url URL]   (with SEALFLOW_TOKEN; otherwise a server is started here)
#
# Python is $PYTHON, or else the python3 on PATH (the active venv); Locust and, for a server
# started here, sealflow must be installed for it (pip install -e '.[load]' in this checkout):
# if not, the run stops with exit status 2 and says what to install.
#
# Each run writes to a folder of its own: loadtests/out/<UTC time>-<pid>/ unless --out names
# one, which must be new or empty. In it: locust_stats.csv (and the other Locust CSVs),
# report.html and, for a server started here, server.log and rss.csv (the server's resident
# memory once a second). The last line on stdout is "reports: <folder>".
set -euo pipefail

die() {
    echo "$*" >&2
    exit 2
}

users=32 rate=8 duration=60s out="" url=""
while (($#)); do
    case "$1" in
        --users) users=$2; shift 2 ;;
        --spawn-rate) rate=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --url) url=$2; shift 2 ;;
        *) die "unknown option $1" ;;
    esac
done

# The interpreter as an absolute path, and --out as one: both are taken relative to the
# caller's directory, before the cd below.
wanted=${PYTHON:-python3}
python=$("$wanted" -c 'import sys; print(sys.executable)' 2>/dev/null) || python=""
[[ -n $python ]] ||
    die "no Python at '$wanted': activate a venv with sealflow installed, or set PYTHON"
if [[ -n $out && $out != /* ]]; then
    out=$PWD/$out
fi
cd -P "$(dirname "${BASH_SOURCE[0]}")/.."

# Locust and sealflow run as modules of that Python, so they are the ones installed for it,
# wherever its scripts are. Everything is checked before anything is written.
has() { "$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }
if [[ -z $url ]]; then
    # Only a server started here needs sealflow; this checkout installs it, and Locust with it.
    has sealflow || die "sealflow is not installed for $python: pip install -e '${PWD}[load]'"
elif [[ -z ${SEALFLOW_TOKEN:-} ]]; then
    die "--url needs SEALFLOW_TOKEN (a token with encrypt and decrypt on the load key)"
fi
has locust || die "locust is not installed for $python: pip install 'sealflow[load]'"

# A fresh folder per run, so that reports of different runs are never mixed.
if [[ -z $out ]]; then
    mkdir -p loadtests/out
    out=$PWD/loadtests/out/$(date -u +%Y%m%dT%H%M%SZ)-$$
    mkdir "$out" # not -p: a folder that exists already is an error, never reused
elif [[ -e $out || -L $out ]]; then
    [[ -d $out ]] || die "--out $out exists and is not a folder"
    [[ -z $(find -H "$out" -mindepth 1 -maxdepth 1 -print -quit) ]] ||
        die "--out $out is not empty: give a new or empty folder (reports of two runs are never mixed)"
else
    mkdir -p "$out"
fi

server_pid="" sampler_pid="" work=""
# Run by the EXIT trap; shellcheck 0.9 calls it unreachable because the script ends with `exit`.
# shellcheck disable=SC2317
cleanup() {
    if [[ -n $sampler_pid ]]; then
        kill "$sampler_pid" 2>/dev/null || true
    fi
    if [[ -n $server_pid ]]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [[ -n $work ]]; then
        rm -rf "$work"
    fi
    return 0
}
trap cleanup EXIT

if [[ -z $url ]]; then
    work=$(mktemp -d)
    port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url="http://127.0.0.1:$port"
    "$python" -m sealflow serve --port "$port" --data-dir "$work/data" >"$work/serve.out" 2>"$out/server.log" &
    server_pid=$!
    for _ in $(seq 100); do
        curl -sf "$url/readyz" >/dev/null 2>&1 && break
        kill -0 "$server_pid" 2>/dev/null || { echo "the server did not start; see $out/server.log" >&2; exit 1; }
        sleep 0.1
    done
    SEALFLOW_TOKEN=$("$python" -m sealflow tokens create --data-dir "$work/data" \
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
fi

# Locust exits 1 when any request failed: a wrong plaintext, a non-200 status (5xx included)
# or a cut-off body are all failures in locustfile.py.
status=0
"$python" -m locust -f loadtests/locustfile.py --headless --host "$url" \
    --users "$users" --spawn-rate "$rate" --run-time "$duration" --stop-timeout 30 \
    --csv "$out/locust" --html "$out/report.html" --only-summary || status=$?
echo "reports: $out"
exit "$status"
