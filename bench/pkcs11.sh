#!/usr/bin/env bash
# CA keys in a PKCS#11 token (SoftHSM2) against CA key files, side by side:
# two data dirs made by the same binary, one with `warrant init`, one with
# `warrant init --pkcs11`; each repetition serves each in turn (alternating
# which goes first) and drives it with `warrant bench --target` for
# `regular` (person certificates) and `aic` (agent certificates). Prints
# per scenario the median certs/s and server CPU per certificate of each,
# and the median of the per-repetition token/file ratios. Not a timed test:
# run it by hand on a quiet box.
#
#   bench/pkcs11.sh [WARRANT_BINARY]
#   REPS=5 SECS=15 AGENTS=64 bench/pkcs11.sh target/release/warrant
set -euo pipefail

bin="${1:-target/release/warrant}"
REPS="${REPS:-3}"
SECS="${SECS:-15}"
AGENTS="${AGENTS:-64}"
SCENARIOS="${SCENARIOS:-aic,regular}"
PASSWORD="bench password 12345"

module=""
for m in /usr/lib/softhsm/libsofthsm2.so /usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so; do
    [ -e "$m" ] && module="$m" && break
done
[ -n "$module" ] || { echo "SoftHSM2 is not installed (apt-get install softhsm2)" >&2; exit 2; }

tmp="$(mktemp -d)"
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/tokens"
printf 'directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n' "$tmp/tokens" >"$tmp/softhsm2.conf"
export SOFTHSM2_CONF="$tmp/softhsm2.conf" WARRANT_PKCS11_PIN=1234
softhsm2-util --init-token --free --label bench --pin 1234 --so-pin 5678 >/dev/null

"$bin" init --data-dir "$tmp/file" --admin-password "$PASSWORD" >/dev/null
"$bin" init --data-dir "$tmp/token" --admin-password "$PASSWORD" \
    --pkcs11 "pkcs11:token=bench?module-path=$module" >/dev/null
for side in file token; do
    # The bench's agents ask for the `gateway:admin` role.
    sed -i 's/^# agent_gateway_roles = .*/agent_gateway_roles = ["gateway:admin"]/' "$tmp/$side/warrant.toml"
done

# Starts `warrant serve` on data dir $1; sets server_pid and url.
serve() {
    local out="$tmp/serve.out"
    : >"$out"
    WARRANT_LISTEN=127.0.0.1:0 WARRANT_LOG_LEVEL=warn "$bin" serve --data-dir "$1" >"$out" 2>"$tmp/serve.err" &
    server_pid=$!
    for _ in $(seq 1 100); do
        url="$(sed -n 's/^listening on \(http:.*\)/\1/p' "$out" | head -n1)"
        [ -n "$url" ] && return 0
        sleep 0.1
    done
    echo "warrant serve did not start: $(cat "$tmp/serve.err")" >&2
    exit 2
}

cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

results="$tmp/results.tsv"
echo "Command: bench/pkcs11.sh (warrant bench --target URL --scenario S --duration ${SECS}s --agents $AGENTS, REPS=$REPS)"
echo "binary: $bin; token: SoftHSM2 ($module)"
IFS=',' read -r -a scenarios <<<"$SCENARIOS"
hz="$(getconf CLK_TCK)"
for rep in $(seq 1 "$REPS"); do
    for scenario in "${scenarios[@]}"; do
        order=(file token)
        [ $((rep % 2)) -eq 0 ] && order=(token file)
        for side in "${order[@]}"; do
            serve "$tmp/$side"
            token="$(curl -sf -X POST "$url/api/v1/users/login" -H 'content-type: application/json' \
                -d "{\"username\":\"admin\",\"password\":\"$PASSWORD\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"
            before="$(cpu_ticks "$server_pid")"
            "$bin" bench --target "$url" --token "$token" --scenario "$scenario" \
                --duration "${SECS}s" --agents "$AGENTS" --json >"$tmp/run.json"
            after="$(cpu_ticks "$server_pid")"
            kill "$server_pid"
            wait "$server_pid" 2>/dev/null || true
            server_pid=""
            python3 - "$tmp/run.json" "$scenario" "$side" "$rep" "$((after - before))" "$hz" >>"$results" <<'EOF'
import json, sys
path, scenario, side, rep, ticks, hz = sys.argv[1:]
t = json.load(open(path))["totals"]
# The server's CPU over the whole run (setup included) per certificate.
cpu_us = int(ticks) / int(hz) * 1e6 / max(t["success"], 1)
print("\t".join([scenario, side, rep, f'{t["issued_per_sec"]:.1f}', f"{cpu_us:.1f}", str(t["failures"])]))
EOF
            tail -n1 "$results" | awk -F'\t' '{printf "  rep %s %s %s: %s certs/s, %s µs server CPU/cert, %s failures\n", $3, $1, $2, $4, $5, $6}' >&2
        done
    done
done

python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print("| scenario | file certs/s | token certs/s | token/file certs/s | file µs CPU/cert | token µs CPU/cert | token/file CPU/cert | failures |")
print("|---|---|---|---|---|---|---|---|")
for scenario in dict.fromkeys(r[0] for r in rows):
    runs = {(r[1], r[2]): r for r in rows if r[0] == scenario}
    reps = sorted({r[2] for r in rows if r[0] == scenario})
    med = lambda side, i: statistics.median(float(runs[(side, k)][i]) for k in reps)
    ratio = lambda i: statistics.median(float(runs[("token", k)][i]) / float(runs[("file", k)][i]) for k in reps)
    fails = sum(int(runs[(s, k)][5]) for s in ("file", "token") for k in reps)
    print(f"| {scenario} | {med('file', 3):,.0f} | {med('token', 3):,.0f} | {ratio(3):.2f}× | "
          f"{med('file', 4):.0f} | {med('token', 4):.0f} | {ratio(4):.2f}× | {fails} |")
EOF
