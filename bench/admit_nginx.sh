#!/usr/bin/env bash
# Admission end to end (issue 46): one nginx terminating mTLS with two
# front servers that differ only in `auth_request /_admit` (asking
# `warrant admit` as docs/admission.md shows), both proxying to the same
# static upstream (a third server block that answers "ok"). gust drives each
# over HTTPS with the agent's client certificate, keep-alive, c=64; REPS
# interleaved pairs (without, with), the order alternating. Prints each run's
# req/s, non-2xx and CPU (nginx, admit, gust), the medians and the ratio
# with/without. Loopback only; not a timed test: run it by hand on a quiet box.
#
#   bench/admit_nginx.sh [WARRANT_BIN] [GUST_BIN]    (default target/release/…)
#   SECS=10 REPS=3 CONNS=64 bench/admit_nginx.sh
#   WORKERS=auto|N        nginx worker_processes (default auto: all cores)
#   ADMIT_KEEPALIVE=1|0   1 (default): /_admit as docs/admission.md shows
#                         it, through an `upstream` block with `keepalive
#                         64` (HTTP/1.1, `Connection ""`), connections to
#                         admit reused; 0: `proxy_pass
#                         http://127.0.0.1:PORT/nginx`, a new connection
#                         per subrequest.
#   WARMUP=2              seconds of load on each server before the runs
# Both front servers reach the static upstream through the same keep-alive
# pool, so they differ in admission only.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
W="${1:-$repo/target/release/warrant}"
G="${2:-$repo/target/release/gust}"
NGINX="${NGINX:-/usr/sbin/nginx}"
SECS="${SECS:-10}"
REPS="${REPS:-3}"
CONNS="${CONNS:-64}"
WORKERS="${WORKERS:-auto}"
ADMIT_KEEPALIVE="${ADMIT_KEEPALIVE:-1}"
WARMUP="${WARMUP:-2}"
tmp="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
die() { echo "admit_nginx: $*" >&2; exit 1; }
for b in "$W" "$G" "$NGINX"; do [ -x "$b" ] || die "$b is not an executable"; done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- Warrant, alice, one agent and warrant admit (DA verification on).
# shellcheck source=bench/admit-world.sh
. "$repo/bench/admit-world.sh"
admit_world
admit_addr="${admit#http://}"

# --- nginx's server certificate, from a throwaway CA (IP SAN 127.0.0.1).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/CN=admit bench CA" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign" \
  -keyout "$tmp/server-ca.key" -out "$tmp/server-ca.pem" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=127.0.0.1" -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >"$tmp/server.ext"
openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/server-ca.pem" -CAkey "$tmp/server-ca.key" \
  -CAcreateserial -days 1 -extfile "$tmp/server.ext" -out "$tmp/server.pem" 2>/dev/null

# --- one nginx: the static upstream, and the two front servers.
without_port="$(free_port)"; with_port="$(free_port)"; static_port="$(free_port)"
if [ "$ADMIT_KEEPALIVE" = 1 ]; then
  admit_upstream="upstream warrant_admit { server $admit_addr; keepalive 64; }"
  admit_pass="proxy_pass http://warrant_admit/nginx;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";"
else
  admit_upstream=""
  admit_pass="proxy_pass http://$admit_addr/nginx;"
fi
front() { # PORT EXTRA-LOCATIONS LOCATION-PREAMBLE
  cat <<EOF
  server {
    listen 127.0.0.1:$1 ssl;
    ssl_certificate $tmp/server.pem;
    ssl_certificate_key $tmp/server.key;
    ssl_client_certificate $tmp/trust.pem;
    ssl_verify_client optional;
    ssl_verify_depth 2;
    keepalive_requests 1000000;
$2
    location / {
$3
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://static_upstream;
    }
  }
EOF
}
admit_location="    location = /_admit {
      internal;
      $admit_pass
      proxy_pass_request_body off;
      proxy_set_header Content-Length \"\";
      proxy_set_header X-Client-Cert \$ssl_client_escaped_cert;
      proxy_set_header X-Original-Method \$request_method;
      proxy_set_header X-Original-URI \$request_uri;
      proxy_set_header X-Original-URL \$scheme://\$http_host\$request_uri;
      proxy_set_header X-Real-IP \$remote_addr;
    }"
admit_preamble='      auth_request /_admit;
      auth_request_set $agent_id           $upstream_http_x_agent_id;
      auth_request_set $agent_principal    $upstream_http_x_agent_principal;
      auth_request_set $agent_mode         $upstream_http_x_agent_mode;
      auth_request_set $agent_capabilities $upstream_http_x_agent_capabilities;
      auth_request_set $agent_serial       $upstream_http_x_agent_serial;
      auth_request_set $agent_token_id     $upstream_http_x_agent_token_id;
      proxy_set_header X-Agent-Id           $agent_id;
      proxy_set_header X-Agent-Principal    $agent_principal;
      proxy_set_header X-Agent-Mode         $agent_mode;
      proxy_set_header X-Agent-Capabilities $agent_capabilities;
      proxy_set_header X-Agent-Serial       $agent_serial;
      proxy_set_header X-Agent-Token-Id     $agent_token_id;'
mkdir -p "$tmp/nginx"
{
  [ "$(id -u)" = 0 ] && echo "user root;"   # workers must read the 0700 temp dir
  cat <<EOF
daemon off;
worker_processes $WORKERS;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/client_body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  upstream static_upstream { server 127.0.0.1:$static_port; keepalive 64; }
  $admit_upstream
  server {
    listen 127.0.0.1:$static_port;
    keepalive_requests 1000000;
    location / { return 200 "ok\n"; }
  }
EOF
  front "$without_port" "" ""
  front "$with_port" "$admit_location" "$admit_preamble"
  echo "}"
} >"$tmp/nginx/nginx.conf"
"$NGINX" -t -q -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/startup.log" \
  || die "nginx -t: $(cat "$tmp/nginx/startup.log")"
"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/startup.log" </dev/null >/dev/null 2>&1 &
nginx_pid=$!
pids+=("$nginx_pid")
for port in "$without_port" "$with_port" "$static_port"; do
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$nginx_pid" 2>/dev/null || die "nginx exited: $(cat "$tmp/nginx/startup.log" "$tmp/nginx/error.log" 2>/dev/null)"
    sleep 0.05
  done
done
sleep 0.2
nginx_procs() { echo "$nginx_pid" $(ps -o pid= --ppid "$nginx_pid"); }
echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'): worker_processes $WORKERS ($(($(echo $(nginx_procs) | wc -w) - 1)) workers), admit keep-alive pool: $([ "$ADMIT_KEEPALIVE" = 1 ] && echo on || echo off)"

# --- The first requests: admitted through /_admit, refused without a certificate.
agent_curl=(curl -s --cacert "$tmp/server-ca.pem" --cert "$tmp/agent.pem" --key "$tmp/agent.key")
for port in "$without_port" "$with_port"; do
  out="$("${agent_curl[@]}" -w ' %{http_code}' "https://127.0.0.1:$port/v1/rows/1")"
  [ "$out" = "ok
 200" ] || die "the first request to :$port answered '$out'; admit: $(tail -3 "$tmp/admit.log")"
done
code="$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tmp/server-ca.pem" "https://127.0.0.1:$with_port/v1/rows/1")"
[ "$code" = 401 ] || die "no certificate through auth_request answered $code, not 401"
code="$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tmp/server-ca.pem" "https://127.0.0.1:$without_port/v1/rows/1")"
[ "$code" = 200 ] || die "no certificate without auth_request answered $code, not 200"
admitted() { curl -sf "$admit/metrics" | awk '/^warrant_admit_decisions_total\{/ && /result="admit"/ {s += $NF} END {print s + 0}'; }
[ "$(admitted)" -ge 1 ] || die "admit counted no admitted decision after the first request"

# --- Runs.
hz="$(getconf CLK_TCK)"
ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s + 0}'; }
drive() { # PORT SECONDS OUT
  local rc=0
  timeout $(($2 + 60)) "$G" -c "$CONNS" -d "${2}s" --cacert "$tmp/server-ca.pem" \
    --cert "$tmp/agent.pem" --key "$tmp/agent.key" "https://127.0.0.1:$1/v1/rows/1" >"$3" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { cat "$3" >&2; die "gust exited $rc against :$1"; }
}
if [ "$WARMUP" -gt 0 ]; then
  drive "$without_port" "$WARMUP" "$tmp/warm-without.txt"
  drive "$with_port" "$WARMUP" "$tmp/warm-with.txt"
fi
: >"$tmp/runs.tsv"
for rep in $(seq 1 "$REPS"); do
  if [ $((rep % 2)) = 1 ]; then order="without with"; else order="with without"; fi
  for kind in $order; do
    port="$without_port"; [ "$kind" = with ] && port="$with_port"
    procs="$(nginx_procs)"
    n0="$(ticks $procs)"; a0="$(ticks "$admit_pid")"; d0="$(admitted)"
    drive "$port" "$SECS" "$tmp/run-$rep-$kind.txt"
    n1="$(ticks $procs)"; a1="$(ticks "$admit_pid")"; d1="$(admitted)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$kind" "$tmp/run-$rep-$kind.txt" \
      "$(((n1 - n0)))" "$(((a1 - a0)))" "$((d1 - d0))" >>"$tmp/runs.tsv"
  done
done

python3 - "$tmp/runs.tsv" "$hz" "$SECS" <<'EOF'
import re, statistics, sys
rows, hz, secs = open(sys.argv[1]).read().split("\n"), float(sys.argv[2]), float(sys.argv[3])
runs, bad = [], []
for line in filter(None, rows):
    rep, kind, path, nginx_t, admit_t, decisions = line.split("\t")
    text = open(path).read()
    rps = float(re.search(r"Requests/sec:\s*([\d.]+)", text).group(1))
    resp = re.search(r"(\d+) responses, (\d+) ok, (\d+) failed", text)
    responses, ok, failed = map(int, resp.groups())
    codes = re.search(r"Status codes: (.*)", text)
    codes = dict(kv.split(": ") for kv in codes.group(1).split(", ")) if codes else {}
    non2xx = sum(int(v) for k, v in codes.items() if not k.startswith("2"))
    errors = re.search(r"Errors: (.*)", text)
    gust_cpu = float(re.search(r"Client CPU:\s*([\d.]+)s", text).group(1))
    r = dict(rep=int(rep), kind=kind, rps=rps, responses=responses, non2xx=non2xx,
             failed=failed, errors=errors.group(1) if errors else "",
             nginx=int(nginx_t) / hz, admit=int(admit_t) / hz, gust=gust_cpu,
             decisions=int(decisions))
    runs.append(r)
    if non2xx or failed or r["errors"] or responses == 0:
        bad.append(f"run {rep} {kind}: {non2xx} non-2xx, {failed} failed, errors: {r['errors'] or 'none'}")
    if kind == "with" and r["decisions"] < responses:
        bad.append(f"run {rep} with: admit counted {r['decisions']} admitted decisions for {responses} responses")

print(f"\n{'run':>3} {'server':<8} {'req/s':>9} {'non-2xx':>7} {'CPU-s nginx':>11} {'admit':>6} {'gust':>6} {'µs CPU/req nginx':>16} {'admit':>6} {'gust':>6}")
for r in runs:
    n = max(r["responses"], 1)
    print(f"{r['rep']:>3} {r['kind']:<8} {r['rps']:>9,.0f} {r['non2xx']:>7} {r['nginx']:>11.2f} {r['admit']:>6.2f} {r['gust']:>6.2f}"
          f" {r['nginx'] / n * 1e6:>16.1f} {r['admit'] / n * 1e6:>6.1f} {r['gust'] / n * 1e6:>6.1f}")
med = {k: statistics.median(r["rps"] for r in runs if r["kind"] == k) for k in ("without", "with")}
pairs = {}
for r in runs:
    pairs.setdefault(r["rep"], {})[r["kind"]] = r["rps"]
pair_ratios = [p["with"] / p["without"] for p in pairs.values() if len(p) == 2]
print(f"\nmedian req/s without auth_request: {med['without']:,.0f}")
print(f"median req/s with auth_request:    {med['with']:,.0f}")
print(f"ratio with/without (of medians):   {med['with'] / med['without']:.3f}")
print(f"per-pair ratios: {', '.join(f'{x:.3f}' for x in pair_ratios)} (median {statistics.median(pair_ratios):.3f})")
for k in ("without", "with"):
    ks = [r for r in runs if r["kind"] == k]
    share = lambda f: statistics.median(r[f] / secs for r in ks)
    print(f"median cores used, {k:<7}: nginx {share('nginx'):.2f}, admit {share('admit'):.2f}, gust {share('gust'):.2f}")
if bad:
    print("\nFAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
EOF
