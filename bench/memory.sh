#!/usr/bin/env bash
# Bounded-memory check: gust's peak RSS must not grow with the number of requests.
# Runs the same closed-model load against `gust target` for SHORT and LONG seconds
# and compares peak RSS (/usr/bin/time %M). Fails (exit 1) if the long run's peak
# exceeds the short run's by more than 20 % + 4 MB (allocator noise).
#
# Usage: bench/memory.sh   (env: SHORT=10 LONG=60 CONC=64 THREADS=2 PORT=18091 GUST=...)
set -euo pipefail

SHORT=${SHORT:-10}
LONG=${LONG:-60}
CONC=${CONC:-64}
THREADS=${THREADS:-2}
PORT=${PORT:-18091}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GUST=${GUST:-${CARGO_TARGET_DIR:-$ROOT/target}/release/gust}
URL="http://127.0.0.1:$PORT/"
[[ -x "$GUST" ]] || { echo "gust binary not found at $GUST" >&2; exit 2; }

"$GUST" target --listen "127.0.0.1:$PORT" --threads 1 2>/dev/null &
TARGET_PID=$!
trap 'kill $TARGET_PID 2>/dev/null || true' EXIT
sleep 0.5

measure() {
  local secs=$1 tim
  tim=$(mktemp)
  /usr/bin/time -f "%M" -o "$tim" "$GUST" -t "$THREADS" -c "$CONC" -d "${secs}s" "$URL" >"$tim.out"
  local rss requests
  rss=$(tail -1 "$tim")
  requests=$(grep -oE '^ +[0-9]+ requests' "$tim.out" | awk '{print $1}')
  echo "$rss $requests"
  rm -f "$tim" "$tim.out"
}

read -r rss_short req_short < <(measure "$SHORT")
read -r rss_long req_long < <(measure "$LONG")
echo "| run | requests | peak RSS (KiB) |"
echo "|---|---:|---:|"
echo "| ${SHORT}s | $req_short | $rss_short |"
echo "| ${LONG}s | $req_long | $rss_long |"
limit=$(( rss_short * 12 / 10 + 4096 ))
if (( rss_long > limit )); then
  echo "FAIL: peak RSS grew from $rss_short to $rss_long KiB (limit $limit)"
  exit 1
fi
echo "PASS: peak RSS bounded ($rss_long KiB for $req_long requests vs $rss_short KiB for $req_short)"
