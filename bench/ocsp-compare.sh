#!/usr/bin/env bash
# Warrant's OCSP responder against `openssl ocsp` in responder mode, both
# answering for the same certificate of the same People CA, driven by gust at
# the same concurrency, POST and GET. For each side and method: median
# responses/s and server CPU µs per response (from /proc/<pid>/stat of the
# server alone) over REPS interleaved repetitions, and the Warrant/OpenSSL
# ratio. Both answer RFC 5019 style (no nonce: gust sends one fixed request);
# OpenSSL signs every response with the CA key, Warrant serves a signed
# answer it keeps per certificate (re-reading the status every 0.5 s).
#
# Usage: bench/ocsp-compare.sh        (env overrides below)
#   DURATION=10s REPS=3 CONCURRENCY=64 THREADS=2 METHODS="POST GET"
#   OPENSSL_MULTI=1  (openssl ocsp -multi N: N responder processes; 1 = the plain responder)
#   GUST=target/release/gust WARRANT=target/release/warrant
# Needs: openssl, curl, python3, cargo build --release -p gust -p warrant.
# (openssl ocsp takes only a port: its responder listens on every interface;
# the load goes to 127.0.0.1.)
set -euo pipefail

DURATION=${DURATION:-10s}
REPS=${REPS:-3}
CONCURRENCY=${CONCURRENCY:-64}
THREADS=${THREADS:-2}
METHODS=${METHODS:-"POST GET"}
OPENSSL_MULTI=${OPENSSL_MULTI:-1}
OPENSSL_PORT=${OPENSSL_PORT:-18890}
WARRANT_PORT=${WARRANT_PORT:-18891}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
GUST=${GUST:-$TARGET_DIR/release/gust}
WARRANT=${WARRANT:-$TARGET_DIR/release/warrant}
WORK=$(mktemp -d)
PIDS=()

cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

need() { command -v "$1" >/dev/null || { echo "$1 is required ($2)" >&2; exit 2; }; }
[[ -x "$GUST" ]] || { echo "gust not found at $GUST (cargo build --release -p gust, or set GUST=)" >&2; exit 2; }
[[ -x "$WARRANT" ]] || { echo "warrant not found at $WARRANT (cargo build --release -p warrant, or set WARRANT=)" >&2; exit 2; }
need openssl "apt-get install -y openssl"
need curl "apt-get install -y curl"
need python3 "apt-get install -y python3"

TICKS=$(getconf CLK_TCK)
cpu_ticks() { # utime + stime of a pid and its children that exited (fields after the last ')')
  python3 -c 'import sys; s=open(f"/proc/{sys.argv[1]}/stat").read(); f=s[s.rfind(")")+2:].split(); print(sum(int(x) for x in f[11:15]))' "$1"
}

# --- Warrant: durable SQLite, one person certificate ---
WARRANT_LISTEN="127.0.0.1:$WARRANT_PORT" WARRANT_ADMIN_PASSWORD=bench-ocsp-pw \
  "$WARRANT" serve --data-dir "$WORK/warrant" >"$WORK/warrant.log" 2>&1 &
WARRANT_PID=$!; PIDS+=("$WARRANT_PID")
for _ in $(seq 1 300); do grep -q "listening on" "$WORK/warrant.log" 2>/dev/null && break; sleep 0.1; done
TOKEN=$(curl -sf -X POST "http://127.0.0.1:$WARRANT_PORT/api/v1/users/login" -H 'Content-Type: application/json' \
  -d '{"username":"admin","password":"bench-ocsp-pw"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
curl -sf -X POST "http://127.0.0.1:$WARRANT_PORT/api/v1/certs" -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' -d '{"cn":"bench-ocsp","validity":30}' >"$WORK/issued.json"
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cert_pem"], end="")' "$WORK/issued.json" >"$WORK/leaf.pem"
CA="$WORK/warrant/ca/people.cert.pem"
CA_KEY="$WORK/warrant/ca/people.key.pem"
ROOT_PEM="$WORK/warrant/ca/root.cert.pem"

# One request, no nonce, for both sides.
openssl ocsp -issuer "$CA" -cert "$WORK/leaf.pem" -no_nonce -reqout "$WORK/req.der" >/dev/null
B64=$(python3 -c 'import base64,sys,urllib.parse; print(urllib.parse.quote(base64.b64encode(open(sys.argv[1],"rb").read()).decode(), safe=""))' "$WORK/req.der")

# --- OpenSSL: the same CA key and certificate, an index with the leaf ---
SERIAL=$(openssl x509 -in "$WORK/leaf.pem" -noout -serial | cut -d= -f2)
EXPIRY=$(python3 -c 'import datetime; print((datetime.datetime.utcnow()+datetime.timedelta(days=30)).strftime("%y%m%d%H%M%SZ"))')
printf 'V\t%s\t\t%s\tunknown\t/CN=bench-ocsp\n' "$EXPIRY" "$SERIAL" >"$WORK/index.txt"
MULTI=()
[[ "$OPENSSL_MULTI" -gt 1 ]] && MULTI=(-multi "$OPENSSL_MULTI")
openssl ocsp -index "$WORK/index.txt" -port "$OPENSSL_PORT" -rsigner "$CA" -rkey "$CA_KEY" \
  -CA "$CA" -nmin 60 -ignore_err "${MULTI[@]}" >"$WORK/openssl.log" 2>&1 &
OPENSSL_PID=$!; PIDS+=("$OPENSSL_PID")
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$OPENSSL_PORT/" && break; sleep 0.1; done

# Sanity: both say "good" for the leaf and verify against the root.
for url in "http://127.0.0.1:$WARRANT_PORT/ocsp" "http://127.0.0.1:$OPENSSL_PORT/"; do
  out=$(openssl ocsp -url "$url" -issuer "$CA" -cert "$WORK/leaf.pem" -no_nonce -CAfile "$ROOT_PEM" -verify_other "$CA" 2>&1)
  grep -q ": good" <<<"$out" && grep -q "Response verify OK" <<<"$out" \
    || { echo "$url did not answer good:"; echo "$out"; cat "$WORK/openssl.log"; exit 1; }
done

# run SIDE METHOD -> "responses_per_s cpu_us_per_response"
run_one() {
  local side=$1 method=$2 pid base args=()
  if [[ $side == openssl ]]; then pid=$OPENSSL_PID; base="http://127.0.0.1:$OPENSSL_PORT"
  else pid=$WARRANT_PID; base="http://127.0.0.1:$WARRANT_PORT/ocsp"; fi
  if [[ $method == POST ]]; then
    args=(-m POST -H 'Content-Type: application/ocsp-request' --body-file "$WORK/req.der" "$base")
  elif [[ $method == HEALTHZ ]]; then
    args=("http://127.0.0.1:$WARRANT_PORT/healthz")
  else
    args=("${base%/}/$B64")
  fi
  local before after
  before=$(cpu_ticks "$pid")
  "$GUST" -c "$CONCURRENCY" -t "$THREADS" -d "$DURATION" --success-status 200 --json "${args[@]}" >"$WORK/out.json"
  after=$(cpu_ticks "$pid")
  python3 - "$WORK/out.json" "$before" "$after" "$TICKS" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["report"]
ok = r.get("successes", 0)
el = r.get("elapsed_s") or 1
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
print(f"{ok/el:.1f} {cpu*1e6/ok if ok else 0:.1f}")
EOF
}

median() { python3 -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.1f}")' "$@"; }

echo "Warrant OCSP vs openssl ocsp responder (same People CA and leaf, no nonce), gust c=$CONCURRENCY $DURATION x $REPS reps, $THREADS gust threads"
echo "$(openssl version) (responder processes: $OPENSSL_MULTI) · warrant $("$WARRANT" --version 2>/dev/null)"
printf "%6s | %12s %12s | %12s %12s | %8s %10s\n" method "openssl r/s" "openssl µs/r" "warrant r/s" "warrant µs/r" "ratio" "cpu ratio"
for method in $METHODS; do
  orr=(); oc=(); wr=(); wc=()
  for rep in $(seq 1 "$REPS"); do   # interleaved, so drift hits both sides alike
    read -r r u < <(run_one openssl "$method"); orr+=("$r"); oc+=("$u")
    read -r r u < <(run_one warrant "$method"); wr+=("$r"); wc+=("$u")
  done
  mor=$(median "${orr[@]}"); moc=$(median "${oc[@]}"); mwr=$(median "${wr[@]}"); mwc=$(median "${wc[@]}")
  ratio=$(python3 -c "print(f'{$mwr/$mor:.1f}x' if $mor > 0 else 'n/a')")
  cpur=$(python3 -c "print(f'{$moc/$mwc:.1f}x' if $mwc > 0 else 'n/a')")
  printf "%6s | %12s %12s | %12s %12s | %8s %10s\n" "$method" "$mor" "$moc" "$mwr" "$mwc" "$ratio" "$cpur"
done
echo "ratio = Warrant responses/s ÷ OpenSSL responses/s; cpu ratio = OpenSSL CPU per response ÷ Warrant's (higher is better for Warrant)."
# The ceiling on this box: the same server and load generator on a route
# that does nothing (GET /healthz).
hr=()
for rep in $(seq 1 "$REPS"); do read -r r _ < <(run_one warrant HEALTHZ); hr+=("$r"); done
echo "ceiling: Warrant GET /healthz (no work) at c=$CONCURRENCY: $(median "${hr[@]}") r/s (median of $REPS)"
