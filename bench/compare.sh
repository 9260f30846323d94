#!/usr/bin/env bash
# Compare gust with wrk, hey, h2load and oha (each only if installed) against the same
# local target: nginx when installed, else `gust target`. Same concurrency, duration
# and thread count for every tool; the median of REPS repetitions is reported as
# req/s and client CPU-seconds (user + system, from /usr/bin/time) per 10k requests,
# with ratios against wrk. The target's own CPU per request is read from /proc in every
# run; from the lowest of those, the script prints the req/s no client could exceed on
# the target's cores (a client that cost nothing), next to oha's.
#
# Usage: bench/compare.sh            (defaults below; override with env vars)
#   DURATION=5  REPS=3  CONCURRENCY="16 64 256"  THREADS=2  PORT=18090
#   GUST=target/release/gust  TOOLS="gust wrk hey h2load oha"  TARGET=auto|nginx|gust
#   PIN=1: pin the target to CPU 1 and every client to CPU 0 (taskset), so that the
#          client, not the target, is the bottleneck and tools cannot steal each
#          other's core; use with THREADS=1.
#   CLIENT_CPUS=0-1 TARGET_CPUS=2-15 TARGET_THREADS=14: the same on a bigger machine
#          (taskset CPU lists); the target gets TARGET_THREADS workers (default 1).
#   SCENARIO=1 (default; 0 skips) SCENARIO_C=64: also compare gust's fixed request
#          with a two-step scenario (step 1 extracts /token from the JSON body, step 2
#          sends it in a header) on a `gust target --body '{"token":"abc"}'`, reps
#          interleaved, and print scenario req/s / fixed req/s (goal: >= 0.80).
set -euo pipefail

DURATION=${DURATION:-5}
REPS=${REPS:-3}
CONCURRENCY=${CONCURRENCY:-"16 64 256"}
THREADS=${THREADS:-2}
PORT=${PORT:-18090}
TOOLS=${TOOLS:-"gust wrk hey h2load oha"}
TARGET=${TARGET:-auto}
PIN=${PIN:-0}
TARGET_THREADS=${TARGET_THREADS:-1}
CLIENT_PIN=(); TARGET_PIN=()
if [[ "$PIN" == 1 ]]; then CLIENT_PIN=(taskset -c 0); TARGET_PIN=(taskset -c 1); fi
if [[ -n "${CLIENT_CPUS:-}" ]]; then CLIENT_PIN=(taskset -c "$CLIENT_CPUS"); fi
if [[ -n "${TARGET_CPUS:-}" ]]; then TARGET_PIN=(taskset -c "$TARGET_CPUS"); fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GUST=${GUST:-${CARGO_TARGET_DIR:-$ROOT/target}/release/gust}
URL="http://127.0.0.1:$PORT/"
WORK=$(mktemp -d)
BODY="hello from the benchmark target"

cleanup() {
  [[ -n "${TARGET_PID:-}" ]] && kill "$TARGET_PID" 2>/dev/null || true
  [[ -f "$WORK/nginx.pid" ]] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

[[ -x "$GUST" ]] || { echo "gust binary not found at $GUST (cargo build --release -p gust, or set GUST=)" >&2; exit 2; }
TIME_BIN=${TIME_BIN:-/usr/bin/time}
[[ -x "$TIME_BIN" ]] || { echo "GNU time is required at $TIME_BIN (apt-get install time, or set TIME_BIN=)" >&2; exit 2; }

start_target() {
  if [[ "$TARGET" != gust ]] && command -v nginx >/dev/null; then
    cat >"$WORK/nginx.conf" <<EOF
worker_processes $TARGET_THREADS;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK;
  uwsgi_temp_path $WORK; scgi_temp_path $WORK;
  server {
    listen 127.0.0.1:$PORT;
    location / { default_type text/plain; return 200 "$BODY"; }
  }
}
EOF
    "${TARGET_PIN[@]}" nginx -c "$WORK/nginx.conf" -p "$WORK"
    TARGET_DESC="nginx $(nginx -v 2>&1 | sed 's/.*\///') (worker_processes $TARGET_THREADS)"
  else
    "${TARGET_PIN[@]}" "$GUST" target --listen "127.0.0.1:$PORT" --threads "$TARGET_THREADS" --body "$BODY" 2>/dev/null &
    TARGET_PID=$!
    TARGET_DESC="gust target ($TARGET_THREADS threads)"
  fi
  for _ in $(seq 50); do
    curl -fs "$URL" >/dev/null 2>&1 && return 0
    (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return 0
    sleep 0.1
  done
  echo "target did not come up on $URL" >&2; exit 2
}

# The target's processes: `gust target`, or nginx's master and its workers.
target_pids() {
  if [[ -n "${TARGET_PID:-}" ]]; then
    echo "$TARGET_PID"
  elif [[ -f "$WORK/nginx.pid" ]]; then
    local master
    master=$(cat "$WORK/nginx.pid")
    echo "$master" $(pgrep -P "$master" || true)
  fi
}

# User + system CPU seconds of the target's processes so far (utime and stime are
# fields 14 and 15 of /proc/PID/stat, after the parenthesised command name).
target_cpu_seconds() {
  local ticks=0 pid
  for pid in $(target_pids); do
    [[ -r /proc/$pid/stat ]] || continue
    ticks=$((ticks + $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { print t / hz }'
}

# Cores the target can use at once: its taskset list (else every core), and no more
# than its TARGET_THREADS workers (nginx worker_processes, gust target --threads), each
# of which runs on one core at a time.
target_cores() {
  local n
  if [[ ${#TARGET_PIN[@]} -gt 0 ]]; then
    n=$(taskset -cp "$(target_pids | awk '{print $1}')" | sed 's/.*: //' | awk -F, '{
      n = 0; for (i = 1; i <= NF; i++) { split($i, r, "-"); n += (r[2] == "" ? 1 : r[2] - r[1] + 1) } print n }')
  else
    n=$(nproc)
  fi
  echo $((n < TARGET_THREADS ? n : TARGET_THREADS))
}

installed() {
  case $1 in
    gust) [[ -x "$GUST" ]] ;;
    *) command -v "$1" >/dev/null ;;
  esac
}

# Prints "<req/s> <client cpu seconds> <target cpu seconds>" for one run.
run_tool() {
  local tool=$1 c=$2 out="$WORK/out" tim="$WORK/time"
  local cmd
  case $tool in
    gust)   cmd=("$GUST" -t "$THREADS" -c "$c" -d "${DURATION}s" "$URL") ;;
    wrk)    cmd=(wrk -t "$THREADS" -c "$c" -d "${DURATION}s" "$URL") ;;
    hey)    cmd=(env GOMAXPROCS="$THREADS" hey -z "${DURATION}s" -c "$c" "$URL") ;;
    h2load) cmd=(h2load --h1 -t "$THREADS" -c "$c" -D "$DURATION" "$URL") ;;
    oha)    cmd=(oha --no-tui -z "${DURATION}s" -c "$c" "$URL") ;;
  esac
  local target_before target_after
  target_before=$(target_cpu_seconds)
  "${CLIENT_PIN[@]}" "$TIME_BIN" -f "%U %S" -o "$tim" "${cmd[@]}" >"$out" 2>&1 || true
  target_after=$(target_cpu_seconds)
  local rps
  case $tool in
    h2load) rps=$(grep -oE '[0-9.]+ req/s' "$out" | head -1 | awk '{print $1}') ;;
    *)      rps=$(grep -E 'Requests/sec' "$out" | head -1 | awk '{print $NF}') ;;
  esac
  local cpu
  cpu=$(awk '{print $1 + $2}' "$tim" | tail -1)
  echo "${rps:-0} ${cpu:-0} $(awk -v a="$target_before" -v b="$target_after" 'BEGIN { print b - a }')"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

start_target
echo "Target: $TARGET_DESC at $URL; ${DURATION}s per run, $REPS reps, $THREADS client threads, $(nproc) cores${TARGET_PIN[*]:+, target: ${TARGET_PIN[*]}}${CLIENT_PIN[*]:+, clients: ${CLIENT_PIN[*]}}"
echo "Command per tool (c = concurrency):"
echo "  gust -t $THREADS -c C -d ${DURATION}s URL | wrk -t $THREADS -c C -d ${DURATION}s URL | GOMAXPROCS=$THREADS hey -z ${DURATION}s -c C URL"
echo "  h2load --h1 -t $THREADS -c C -D $DURATION URL | oha --no-tui -z ${DURATION}s -c C URL"
echo

declare -A RPS CPU10K TARGET_US
for c in $CONCURRENCY; do
  for tool in $TOOLS; do : >"$WORK/rps.$tool"; : >"$WORK/cpu.$tool"; : >"$WORK/target.$tool"; done
  # Repetitions are the outer loop so that load drift on a shared machine hits every
  # tool alike instead of whichever happened to run during it.
  for rep in $(seq "$REPS"); do
    for tool in $TOOLS; do
      installed "$tool" || continue
      read -r rps cpu target_cpu < <(run_tool "$tool" "$c")
      echo "$rps" >>"$WORK/rps.$tool"
      # CPU-seconds per 10k requests for this repetition.
      awk -v r="$rps" -v c="$cpu" -v d="$DURATION" 'BEGIN { n = r * d; print (n > 0) ? c * 10000 / n : 0 }' >>"$WORK/cpu.$tool"
      # The target's CPU µs per request it answered in this repetition.
      awk -v r="$rps" -v c="$target_cpu" -v d="$DURATION" 'BEGIN { n = r * d; print (n > 0) ? c * 1e6 / n : 0 }' >>"$WORK/target.$tool"
      echo "  rep $rep $tool c=$c: $rps req/s, ${cpu}s CPU, target ${target_cpu}s CPU" >&2
    done
  done
  for tool in $TOOLS; do
    installed "$tool" || continue
    RPS[$tool,$c]=$(median <"$WORK/rps.$tool")
    CPU10K[$tool,$c]=$(median <"$WORK/cpu.$tool")
    TARGET_US[$tool,$c]=$(median <"$WORK/target.$tool")
  done
done

echo "| tool | c | req/s (median) | CPU-s / 10k req (median) | req/s vs wrk | CPU/req vs wrk | target CPU µs/req (median) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for c in $CONCURRENCY; do
  for tool in $TOOLS; do
    [[ -n "${RPS[$tool,$c]:-}" ]] || continue
    base_rps=${RPS[wrk,$c]:-}
    base_cpu=${CPU10K[wrk,$c]:-}
    ratio_rps=$(awk -v a="${RPS[$tool,$c]}" -v b="$base_rps" 'BEGIN { print (b > 0) ? sprintf("%.2fx", a / b) : "n/a" }')
    ratio_cpu=$(awk -v a="${CPU10K[$tool,$c]}" -v b="$base_cpu" 'BEGIN { print (b > 0) ? sprintf("%.2fx", a / b) : "n/a" }')
    printf '| %s | %s | %.0f | %.3f | %s | %s | %.2f |\n' "$tool" "$c" "${RPS[$tool,$c]}" "${CPU10K[$tool,$c]}" "$ratio_rps" "$ratio_cpu" "${TARGET_US[$tool,$c]}"
  done
done

# Issue 5 also asks for gust against oha; print that ratio next to the table.
for c in $CONCURRENCY; do
  [[ -n "${RPS[gust,$c]:-}" && -n "${RPS[oha,$c]:-}" ]] || continue
  awk -v c="$c" -v g="${RPS[gust,$c]}" -v o="${RPS[oha,$c]}" -v gc="${CPU10K[gust,$c]}" -v oc="${CPU10K[oha,$c]}" \
    'BEGIN { printf "gust vs oha at c=%s: %.2fx req/s, %.2fx CPU per request\n", c, (o > 0) ? g / o : 0, (oc > 0) ? gc / oc : 0 }'
done

# What the target alone allows. Every request costs the target at least the lowest CPU
# time per request measured above (whichever client drove it), so on its cores no client,
# however cheap, can be answered faster than cores / that time. With the client on the
# same cores the real ceiling is lower still: the client's own CPU comes out of them.
cores=$(target_cores)
for c in $CONCURRENCY; do
  best=""
  for tool in $TOOLS; do
    v=${TARGET_US[$tool,$c]:-}
    [[ -n "$v" ]] && awk -v v="$v" 'BEGIN { exit !(v > 0) }' || continue
    if [[ -z "$best" ]] || awk -v v="$v" -v b="$best" 'BEGIN { exit !(v < b) }'; then best=$v; fi
  done
  [[ -n "$best" ]] || continue
  awk -v c="$c" -v b="$best" -v n="$cores" -v o="${RPS[oha,$c]:-0}" 'BEGIN {
    ceil = n * 1e6 / b
    printf "target ceiling at c=%s: %d core(s) / %.2f µs per request = %.0f req/s for any client", c, n, b, ceil
    if (o > 0) printf " (%.2fx oha)", ceil / o
    printf "\n" }'
done

# Scripted scenario vs fixed request (issue 34): same target, same concurrency.
if [[ "${SCENARIO:-1}" == 1 ]]; then
  SC_C=${SCENARIO_C:-64}
  SC_PORT=$((PORT + 1))
  SC_URL="http://127.0.0.1:$SC_PORT/"
  "${TARGET_PIN[@]}" "$GUST" target --listen "127.0.0.1:$SC_PORT" --threads "$TARGET_THREADS" --body '{"token":"abc"}' 2>/dev/null &
  SC_PID=$!
  trap 'kill "$SC_PID" 2>/dev/null || true; cleanup' EXIT
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$SC_PORT) 2>/dev/null && break; sleep 0.1; done
  cat >"$WORK/scenario.toml" <<EOF
url = "$SC_URL"
mode = "closed"
concurrency = $SC_C
workers = $THREADS
duration = "${DURATION}s"

[[steps]]
name = "login"
method = "POST"
path = "/login"
body = '{"user":"u{{seq}}"}'
extract.token = { json = "/token" }

[[steps]]
name = "issue"
path = "/issue"
headers = { Authorization = "Bearer {{token}}" }
EOF
  : >"$WORK/sc.fixed"; : >"$WORK/sc.scenario"
  for rep in $(seq "$REPS"); do
    "${CLIENT_PIN[@]}" "$GUST" -t "$THREADS" -c "$SC_C" -d "${DURATION}s" "$SC_URL" >"$WORK/out" 2>&1 || true
    fixed=$(grep -E 'Requests/sec' "$WORK/out" | head -1 | awk '{print $NF}')
    "${CLIENT_PIN[@]}" "$GUST" run "$WORK/scenario.toml" >"$WORK/out" 2>&1 || true
    scen=$(grep -E 'Requests/sec' "$WORK/out" | head -1 | awk '{print $NF}')
    echo "  rep $rep c=$SC_C: fixed ${fixed:-0} req/s, scenario ${scen:-0} req/s" >&2
    echo "${fixed:-0}" >>"$WORK/sc.fixed"; echo "${scen:-0}" >>"$WORK/sc.scenario"
  done
  f=$(median <"$WORK/sc.fixed"); s=$(median <"$WORK/sc.scenario")
  awk -v c="$SC_C" -v f="$f" -v s="$s" 'BEGIN {
    printf "gust scenario (2 steps, 1 extraction) vs fixed request at c=%s: %.0f vs %.0f req/s = %.2fx (goal >= 0.80)\n", c, s, f, (f > 0) ? s / f : 0 }'
fi
