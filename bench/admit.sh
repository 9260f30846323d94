#!/usr/bin/env bash
# Warm admission decisions: `warrant admit` answering nginx-style
# subrequests for one agent certificate it has already seen, driven by gust
# at c=64 on loopback. Prints decisions/s, admit's CPU per decision (from
# /proc) and its RSS, and the same generator against admit's `/healthz` (the
# box's ceiling for any answer). Not a timed test: run it by hand on a
# quiet box.
#
#   bench/admit.sh [WARRANT_BIN] [GUST_BIN]     (default target/release/…)
#   SECS=10 CONNS=64 bench/admit.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
W="${1:-$repo/target/release/warrant}"
G="${2:-$repo/target/release/gust}"
SECS="${SECS:-10}"
CONNS="${CONNS:-64}"
tmp="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# shellcheck source=bench/admit-world.sh
. "$repo/bench/admit-world.sh"
admit_world
escaped="$(python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(open(sys.argv[1]).read(), safe=""))' "$tmp/agent.pem")"
headers=(-H "X-Original-Method: GET" -H "X-Original-URI: /v1/rows/1" -H "X-Real-IP: 127.0.0.1" -H "X-Client-Cert: $escaped")
code="$(curl -s -o /dev/null -w '%{http_code}' "${headers[@]}" "$admit/nginx")"
[ "$code" = 200 ] || { echo "the warm-up decision answered $code" >&2; exit 1; }

ticks() { awk '{print $14 + $15}' "/proc/$admit_pid/stat"; }
hz="$(getconf CLK_TCK)"
before="$(ticks)"
"$G" -c "$CONNS" -d "${SECS}s" "${headers[@]}" "$admit/nginx" >"$tmp/gust.txt"
after="$(ticks)"
rss_kb="$(awk '/VmRSS/ {print $2}' "/proc/$admit_pid/status")"
cat "$tmp/gust.txt"
# The ceiling on this box: the same generator, connections and service
# answering `/healthz` (routing and HTTP, no decision).
"$G" -c "$CONNS" -d "${SECS}s" "$admit/healthz" >"$tmp/noop.txt"
python3 - "$tmp/gust.txt" "$tmp/noop.txt" <<'EOF'
import re, sys
rate = lambda p: float(re.search(r'Requests/sec:\s*([\d.]+)', open(p).read()).group(1))
warm, noop = rate(sys.argv[1]), rate(sys.argv[2])
print(f"no-op ceiling (/healthz): {noop:,.0f} req/s; decisions at {warm / noop:.2f}x of it")
EOF
python3 - "$tmp/gust.txt" "$before" "$after" "$hz" "$rss_kb" <<'EOF'
import re, sys
text, before, after, hz, rss = open(sys.argv[1]).read(), *map(float, sys.argv[2:])
total = re.search(r'(\d+) requests in', text)
rps = re.search(r'Requests/sec:\s*([\d.]+)', text)
codes = re.search(r'Status codes: (.*)', text)
n = int(total.group(1)) if total else 0
cpu_s = (after - before) / hz
print(f"decisions/s: {float(rps.group(1)) if rps else float('nan'):,.0f}")
print(f"admit CPU per decision: {cpu_s / n * 1e6:.1f} µs ({cpu_s:.2f} s over {n} decisions)" if n else "no decisions")
print(f"status codes: {codes.group(1) if codes else '?'}; admit RSS: {rss / 1024:.1f} MiB")
EOF
