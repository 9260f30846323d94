#!/usr/bin/env bash
# Gust across processes on one box: the aggregate req/s and the client CPU per
# request of one `gust` process against 2 and 4 execution segments that run the
# same closed-model load together (started on one instant with --start-at),
# all against one `gust target` on 127.0.0.1. The three configurations run back to
# back in each repetition, their order rotating; prints the medians and the
# ratios to one process. Not a timed test: run it by hand on a quiet box.
#
#   bench/segments.sh [GUST_BINARY]          default target/release/gust
#   REPS=3 SECS=10 CONNS=64 bench/segments.sh
#
# The segments share the box's cores with each other, so on one box their
# aggregate is expected near one process's: the figure is the cost of splitting
# (more threads, more processes), not a gain.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
GUST="${1:-$repo/target/release/gust}"
REPS="${REPS:-3}"
SECS="${SECS:-10}"
CONNS="${CONNS:-64}"
CORES="$(nproc)"
work="$(mktemp -d)"
trap 'kill "$target_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

port=$((20000 + RANDOM % 20000))
"$GUST" target --listen "127.0.0.1:$port" --threads 1 >/dev/null 2>&1 &
target_pid=$!
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done

# run N: N segments (threads split evenly, at least 1 each), reports in $work/N.*.json
run() {
    local n="$1" rep="$2" threads start pids=()
    threads=$(( CORES / n )); [ "$threads" -ge 1 ] || threads=1
    start="$(date -u -d '+1 second' +%Y-%m-%dT%H:%M:%SZ)"
    for i in $(seq 0 $((n - 1))); do
        local seg=()
        [ "$n" -gt 1 ] && seg=(--segment "$i/$n" --start-at "$start")
        "$GUST" "http://127.0.0.1:$port/" -c "$CONNS" -d "${SECS}s" -t "$threads" \
            "${seg[@]}" --json > "$work/$n.$rep.$i.json" &
        pids+=($!)
    done
    wait "${pids[@]}"
}

for rep in $(seq 1 "$REPS"); do
    case $((rep % 3)) in
        1) order="1 2 4" ;;
        2) order="2 4 1" ;;
        0) order="4 1 2" ;;
    esac
    for n in $order; do run "$n" "$rep"; done
done

python3 - "$work" "$REPS" <<'EOF'
import json, statistics, sys, glob
work, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for n in (1, 2, 4):
    rps, cpu = [], []
    for rep in range(1, reps + 1):
        reports = [json.load(open(f))["report"] for f in sorted(glob.glob(f"{work}/{n}.{rep}.*.json"))]
        responses = sum(r["responses"] for r in reports)
        # The segments ran over one window: the slowest one's sending time.
        seconds = max(r["elapsed_s"] for r in reports)
        rps.append(responses / seconds)
        cpu.append(sum(r["client_cpu_s"] for r in reports) / responses * 1e6)
    rows[n] = (statistics.median(rps), statistics.median(cpu))
print(f"{'processes':>9} {'req/s':>10} {'vs 1':>7} {'client µs/req':>14} {'vs 1':>7}")
for n, (rps, cpu) in rows.items():
    print(f"{n:>9} {rps:>10.0f} {rps / rows[1][0]:>7.3f} {cpu:>14.2f} {cpu / rows[1][1]:>7.3f}")
EOF
