#!/bin/bash
# `sealflow encrypt` / `decrypt` of a 256 MiB file, --duplex against --no-duplex (docs/BENCHMARKS.md,
# "CLI transports"): a dev server pinned to core 0, the CLI to core 1, output to /dev/null (the
# transport, not the disk), RUNS (15) runs of each; prints the median and the fastest run.
# Run from the repository with sealflow installed: bash benchmarks/cli_transports.sh [RUNS]
set -euo pipefail
RUNS=${1:-15}
SF=$(command -v sealflow)
D=$(mktemp -d)
head -c $((256 << 20)) /dev/urandom > "$D/plain"
PORT=$((20000 + RANDOM % 10000))
(cd "$D" && SEALFLOW_DATA_DIR="$D/data" exec taskset -c 0 "$SF" serve --port $PORT > "$D/serve.out" 2> "$D/serve.log") &
PID=$!
trap 'kill $PID; wait $PID 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && grep -q "Root token:" "$D/serve.out" && break
    sleep 0.1
done
SEALFLOW_TOKEN=$(grep "Root token:" "$D/serve.out" | cut -d' ' -f3)
export SEALFLOW_TOKEN SEALFLOW_URL=http://127.0.0.1:$PORT
taskset -c 1 "$SF" encrypt --key default -i "$D/plain" -o "$D/sealed"
# Interleaved (one run of each transport in turn), so that a change in the machine's load
# during the benchmark weighs on both alike.
for cmd in encrypt decrypt; do
    if [ $cmd = encrypt ]; then args=(--key default -i "$D/plain"); else args=(-i "$D/sealed"); fi
    for _ in $(seq "$RUNS"); do
        for transport in --duplex --no-duplex; do
            start=$(date +%s.%N)
            taskset -c 1 "$SF" $cmd "${args[@]}" $transport -o /dev/null
            echo "$cmd $transport $(echo "$(date +%s.%N) - $start" | bc)"
        done
    done
done | python3 -c '
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in sys.stdin:
    cmd, transport, seconds = line.split()
    runs[cmd, transport].append(float(seconds))
for (cmd, transport), times in runs.items():
    median = statistics.median(times)
    print(f"{cmd} {transport:12} median {median:.3f} s ({256 / median:.0f} MiB/s), fastest {min(times):.3f} s")
'
taskset -c 1 "$SF" decrypt -i "$D/sealed" -o "$D/out" && cmp "$D/out" "$D/plain" && echo "round trip: identical"
