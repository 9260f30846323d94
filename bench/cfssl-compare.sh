#!/usr/bin/env bash
# Warrant's CSR issuance (keys=csr, profile tls-client, durable SQLite) against
# Debian's `cfssl serve` signing the same CSR with a P-256 CA (no database),
# both driven by gust at the same concurrency and duration. For each side and
# concurrency: median certs/s and server CPU µs per cert (from /proc/<pid>/stat
# of the server process alone) over REPS repetitions, and Warrant/cfssl ratios.
#
# Usage: bench/cfssl-compare.sh        (env overrides below)
#   DURATION=10s REPS=3 CONCURRENCY="16 64 256" THREADS=2
#   GUST=target/release/gust WARRANT=target/release/warrant CFSSL=cfssl
# Needs: cfssl (apt-get install -y golang-cfssl), openssl, curl, python3,
#        cargo build --release -p gust -p warrant
set -euo pipefail

DURATION=${DURATION:-10s}
REPS=${REPS:-3}
CONCURRENCY=${CONCURRENCY:-"16 64 256"}
THREADS=${THREADS:-2}
CFSSL_PORT=${CFSSL_PORT:-18888}
WARRANT_PORT=${WARRANT_PORT:-18889}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
GUST=${GUST:-$TARGET_DIR/release/gust}
WARRANT=${WARRANT:-$TARGET_DIR/release/warrant}
CFSSL=${CFSSL:-cfssl}
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
need "$CFSSL" "apt-get install -y golang-cfssl"
need openssl "apt-get install -y openssl"
need curl "apt-get install -y curl"
need python3 "apt-get install -y python3"

TICKS=$(getconf CLK_TCK)
cpu_ticks() { # utime + stime of a pid (fields after the last ')')
  python3 -c 'import sys; s=open(f"/proc/{sys.argv[1]}/stat").read(); f=s[s.rfind(")")+2:].split(); print(int(f[11])+int(f[12]))' "$1"
}
wait_port() {
  for _ in $(seq 1 200); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done
  echo "nothing listening on port $1" >&2; exit 1
}

# One CSR (P-256) used by both sides: only its public key matters to either CA.
openssl ecparam -name prime256v1 -genkey -noout -out "$WORK/agent.key" 2>/dev/null
openssl req -new -key "$WORK/agent.key" -subj "/CN=bench-agent" -out "$WORK/agent.csr" 2>/dev/null

# --- cfssl: P-256 CA, client-auth profile, no database ---
openssl ecparam -name prime256v1 -genkey -noout -out "$WORK/ca-key.pem" 2>/dev/null
openssl req -x509 -new -key "$WORK/ca-key.pem" -subj "/CN=cfssl bench CA" -days 30 -out "$WORK/ca.pem" 2>/dev/null
cat >"$WORK/cfssl.json" <<'EOF'
{"signing": {"default": {"usages": ["digital signature", "client auth"], "expiry": "720h"}}}
EOF
"$CFSSL" serve -address 127.0.0.1 -port "$CFSSL_PORT" -ca "$WORK/ca.pem" -ca-key "$WORK/ca-key.pem" \
  -config "$WORK/cfssl.json" >"$WORK/cfssl.log" 2>&1 &
CFSSL_PID=$!; PIDS+=("$CFSSL_PID")
python3 -c 'import json,sys; print(json.dumps({"certificate_request": open(sys.argv[1]).read()}))' "$WORK/agent.csr" >"$WORK/cfssl-body.json"

# --- Warrant: durable SQLite, operator token from one login ---
WARRANT_LISTEN="127.0.0.1:$WARRANT_PORT" WARRANT_ADMIN_PASSWORD=bench-compare-pw \
  "$WARRANT" serve --data-dir "$WORK/warrant" >"$WORK/warrant.log" 2>&1 &
WARRANT_PID=$!; PIDS+=("$WARRANT_PID")
for _ in $(seq 1 300); do grep -q "listening on" "$WORK/warrant.log" 2>/dev/null && break; sleep 0.1; done
for _ in $(seq 1 300); do grep -q "listening on" "$WORK/cfssl.log" 2>/dev/null && break; curl -s -o /dev/null "http://127.0.0.1:$CFSSL_PORT/" && break; sleep 0.1; done
TOKEN=$(curl -sf -X POST "http://127.0.0.1:$WARRANT_PORT/api/v1/users/login" -H 'Content-Type: application/json' \
  -d '{"username":"admin","password":"bench-compare-pw"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
python3 -c 'import json,sys; print(json.dumps({"ca":"people","cn":"bench-agent","profile":"tls-client","validity":30,"csr_pem":open(sys.argv[1]).read()}))' \
  "$WORK/agent.csr" >"$WORK/warrant-body.json"

# Sanity: each side signs the CSR once.
curl -sf -X POST "http://127.0.0.1:$CFSSL_PORT/api/v1/cfssl/sign" -d @"$WORK/cfssl-body.json" | grep -q '"success":true' \
  || { echo "cfssl did not sign the CSR:"; cat "$WORK/cfssl.log"; exit 1; }
curl -sf -X POST "http://127.0.0.1:$WARRANT_PORT/api/v1/certs" -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' -d @"$WORK/warrant-body.json" | grep -q cert_pem \
  || { echo "warrant did not sign the CSR"; cat "$WORK/warrant.log"; exit 1; }

# run SIDE C -> "certs_per_s cpu_us_per_cert"
run_one() {
  local side=$1 c=$2 pid url body hdrs=()
  if [[ $side == cfssl ]]; then
    pid=$CFSSL_PID; url="http://127.0.0.1:$CFSSL_PORT/api/v1/cfssl/sign"; body="$WORK/cfssl-body.json"
  else
    pid=$WARRANT_PID; url="http://127.0.0.1:$WARRANT_PORT/api/v1/certs"; body="$WORK/warrant-body.json"
    hdrs=(-H "Authorization: Bearer $TOKEN")
  fi
  local before after
  before=$(cpu_ticks "$pid")
  "$GUST" -c "$c" -t "$THREADS" -d "$DURATION" -m POST -H 'Content-Type: application/json' "${hdrs[@]}" \
    --body-file "$body" --success-status 200 --json "$url" >"$WORK/out.json"
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

echo "cfssl vs Warrant CSR signing (P-256 CA, P-256 CSR, client-auth leaf), gust $DURATION x $REPS reps, $THREADS gust threads"
echo "Warrant: durable SQLite (every 200 is committed). cfssl: no database (cfssl serve without -db-config)."
echo "$("$CFSSL" version 2>/dev/null | head -1) · warrant $("$WARRANT" --version 2>/dev/null)"
printf "%6s | %12s %14s | %12s %14s | %8s %10s\n" c "cfssl c/s" "cfssl µs/cert" "warrant c/s" "warrant µs/c" "ratio" "cpu ratio"
for c in $CONCURRENCY; do
  cr=(); cc=(); wr=(); wc=()
  for rep in $(seq 1 "$REPS"); do   # interleaved, so drift hits both sides alike
    read -r r u < <(run_one cfssl "$c"); cr+=("$r"); cc+=("$u")
    read -r r u < <(run_one warrant "$c"); wr+=("$r"); wc+=("$u")
  done
  mcr=$(median "${cr[@]}"); mcc=$(median "${cc[@]}"); mwr=$(median "${wr[@]}"); mwc=$(median "${wc[@]}")
  ratio=$(python3 -c "print(f'{$mwr/$mcr:.2f}x' if $mcr > 0 else 'n/a')")
  cpur=$(python3 -c "print(f'{$mcc/$mwc:.2f}x' if $mwc > 0 else 'n/a')")
  printf "%6s | %12s %14s | %12s %14s | %8s %10s\n" "$c" "$mcr" "$mcc" "$mwr" "$mwc" "$ratio" "$cpur"
done
echo "ratio = Warrant certs/s ÷ cfssl certs/s; cpu ratio = cfssl CPU per cert ÷ Warrant CPU per cert (higher is better for Warrant)."
