#!/usr/bin/env bash
# The cost of streaming a segment's ticks to a daemon: two segments (0/2 and 1/2)
# of one open-model run against one `gust target` on 127.0.0.1, alone (each writes
# its own report) and meeting on a `gust serve` (`--daemon URL --run NAME`: every
# tick, with its histograms, posted to the daemon; the report handed over at the
# end). The two modes alternate in each repetition; prints, per rate, the median
# process CPU (user + system) of segment 0/2 in each mode, the median of the
# pairs' extra CPU per second of run, and that cost's share of the segment's CPU.
# Not a timed test: run it by hand on a quiet box.
#
#   bench/segment-stream.sh [GUST_BINARY]        default target/release/gust
#   REPS=5 SECS=10 RATES="2000 20000" bench/segment-stream.sh
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
GUST="${1:-$repo/target/release/gust}"
REPS="${REPS:-5}"
SECS="${SECS:-10}"
RATES="${RATES:-2000 20000}"
work="$(mktemp -d)"
trap 'kill "$target_pid" "$serve_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

wait_listening() {
    for _ in $(seq 100); do
        grep -q "listening on" "$1" && return 0
        sleep 0.1
    done
    echo "no listener in $1" >&2
    exit 1
}
"$GUST" target --listen 127.0.0.1:0 --threads 1 2>"$work/target.log" &
target_pid=$!
"$GUST" serve --listen 127.0.0.1:0 --db "$work/history.db" 2>"$work/serve.log" &
serve_pid=$!
wait_listening "$work/target.log"
wait_listening "$work/serve.log"
target_url="$(sed -n 's/^gust target listening on //p' "$work/target.log")"
serve_url="$(sed -n 's/^gust serve listening on //p' "$work/serve.log")"

# Runs a command and prints its CPU seconds (user + system) on fd 3.
cpu_of() {
    python3 -c '
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, ru = os.wait4(p.pid, 0)
if status != 0:
    sys.exit("segment failed: %s" % status)
print(ru.ru_utime + ru.ru_stime)' "$@"
}

# run RATE MODE REP: both segments; segment 0's CPU seconds to $work/RATE.MODE.REP
run() {
    local rate="$1" mode="$2" rep="$3" start spec="$work/spec.$1.toml" meet=()
    printf 'url = "%s"\nmode = "open"\nrate = %s\nduration = "%ss"\nworkers = 1\n' \
        "$target_url" "$rate" "$SECS" > "$spec"
    start="$(date -u -d '+2 second' +%Y-%m-%dT%H:%M:%SZ)"
    [ "$mode" = stream ] && meet=(--daemon "$serve_url" --run "bench-$rate-$rep")
    cpu_of "$GUST" run "$spec" --segment 1/2 --start-at "$start" "${meet[@]}" > /dev/null &
    local other=$!
    cpu_of "$GUST" run "$spec" --segment 0/2 --start-at "$start" "${meet[@]}" \
        > "$work/$rate.$mode.$rep"
    wait "$other"
}

for rate in $RATES; do
    for rep in $(seq 1 "$REPS"); do
        if [ $((rep % 2)) = 1 ]; then order="alone stream"; else order="stream alone"; fi
        for mode in $order; do run "$rate" "$mode" "$rep"; done
    done
done

python3 - "$work" "$REPS" "$SECS" $RATES <<'EOF'
import statistics, sys
work, reps, secs, rates = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
print(f"segment 0/2 of an open run, {secs} s, median of {reps} interleaved pairs")
print(f"{'rate/s':>8} {'alone CPU s':>12} {'streaming CPU s':>16} {'cost ms/s':>10} {'share':>8}")
for rate in rates:
    cpu = {m: [float(open(f"{work}/{rate}.{m}.{r}").read()) for r in range(1, reps + 1)]
           for m in ("alone", "stream")}
    alone, stream = statistics.median(cpu["alone"]), statistics.median(cpu["stream"])
    # Each pair's extra CPU, per second of the run; its median over the pairs.
    extra = [(s - a) / secs * 1000 for a, s in zip(cpu["alone"], cpu["stream"])]
    cost = statistics.median(extra)
    print(f"{rate:>8} {alone:>12.3f} {stream:>16.3f} {cost:>10.2f} {cost / (alone / secs * 1000) * 100:>7.2f}%")
    print(f"{'':>8} pairs (ms/s): " + ", ".join(f"{e:+.2f}" for e in extra))
EOF
