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

wait_line() { # FILE PREFIX → the rest of the first line starting with PREFIX
  for _ in $(seq 1 300); do
    v="$(sed -n "s|^$2||p" "$1" | head -n1)"
    [ -n "$v" ] && { echo "$v"; return; }
    sleep 0.1
  done
  echo "no '$2' in $1" >&2; exit 1
}
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

pw="admit bench $(date +%s%N)"
WARRANT_ADMIN_PASSWORD="$pw" WARRANT_LISTEN=127.0.0.1:0 WARRANT_LOG_LEVEL=warn \
  "$W" serve --data-dir "$tmp/data" >"$tmp/serve.out" 2>"$tmp/serve.log" &
pids+=($!)
ca="$(wait_line "$tmp/serve.out" 'listening on ')"
token="$(curl -sf "$ca/api/v1/users/login" -H 'Content-Type: application/json' \
  -d "{\"username\":\"admin\",\"password\":\"$pw\"}" | field token)"
curl -sf "$ca/api/v1/certs" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"cn":"alice","principal_authorization":{"grants":[{"scheme_id":"db","capability_id":"read"}],"delegation_policy":{"allowed_mode":0,"max_agents":3}}}' \
  >"$tmp/alice.json"
field cert_pem <"$tmp/alice.json" >"$tmp/alice.pem"
field key_pem <"$tmp/alice.json" >"$tmp/alice.key"
"$W" delegate --principal-key "$tmp/alice.key" --principal-cert "$tmp/alice.pem" \
  --principal-uid "$(field principal_uid <"$tmp/alice.json")" \
  --agent-id bench-bot --subject "/OU=gateway:reader/CN=bench-bot" \
  --capability db:read --lifetime 1800 >"$tmp/agent-request.json"
curl -sf "$ca/api/v1/certs" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d @"$tmp/agent-request.json" | field cert_pem >"$tmp/agent.pem"
{ curl -sf "$ca/api/v1/ca/people"; curl -sf "$ca/api/v1/ca/root"; } >"$tmp/trust.pem"
printf 'GET /v1/rows/* db:read\n' >"$tmp/rules.txt"

"$W" admit --listen 127.0.0.1:0 --trust "$tmp/trust.pem" --rules "$tmp/rules.txt" \
  --crl-url "$ca/api/v1/crl/people" --principals "$tmp/alice.pem" >"$tmp/admit.out" 2>"$tmp/admit.log" &
admit_pid=$!
pids+=("$admit_pid")
admit="$(wait_line "$tmp/admit.out" 'admit: listening on ')"
for _ in $(seq 1 100); do curl -sf "$admit/readyz" >/dev/null && break; sleep 0.1; done
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
