#!/usr/bin/env bash
# What durability costs the CA (issue 4): agent certificates issued per second
# by the whole server (HTTP, DA checks, signing, the write path), durable vs
# buffered, at 1, 64 and 512 concurrent agents, on SQLite (a fresh temp data
# dir per run) and PostgreSQL (a fresh scratch database per run, dropped
# after it), optionally MariaDB. Prints a Markdown table of medians with the
# durable/buffered ratio, the ratio of each repetition's back-to-back pair of
# runs and their median, an A/A control (a second buffered run in each
# repetition: buffered against buffered shows how far two runs of the same
# build differ on this box), and whether the issue's goal of durable ≥ 90 %
# of buffered at 64+ agents is met (on the median of the paired ratios).
# Two columns say where a gap comes from: the mean time a durable issuance
# waited for its commit and WAL fsync (the server's
# warrant_durable_wait_seconds), and the share of the cores the server and
# Gust kept busy (not PostgreSQL's or MariaDB's own processes). Not a timed
# test: run it by hand on a quiet box. bench/write-path.sh measures the store's
# write path alone, without the server; see bench/README.md ("Write path").
#
#   bench/ca-durability.sh
#   REPS=5 SECS=20 AGENTS=64,512 bench/ca-durability.sh
#   SCENARIO=regular bench/ca-durability.sh     # person certificates, no nonce
#   WARRANT_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3306/test bench/ca-durability.sh
#
# Environment:
#   WARRANT_BENCH_POSTGRES_URL  server to bench on (default
#                               postgres://postgres@127.0.0.1:5432/test; "" skips);
#                               needs psql to create the scratch databases
#   WARRANT_BENCH_MYSQL_URL     MariaDB/MySQL server, mysql://user@host:port/db
#                               (unset: skipped); needs the mysql client
#   REPS (3), SECS (10), AGENTS (1,64,512), SCENARIO (aic)
#   CONTROL (1)                 0 skips the A/A control run (a third of the time)
#   CARGO_TARGET_DIR            where the release binary is built
set -euo pipefail

cd "$(dirname "$0")/.."

REPS="${REPS:-3}"
SECS="${SECS:-10}"
AGENTS="${AGENTS:-1,64,512}"
SCENARIO="${SCENARIO:-aic}"
CONTROL="${CONTROL:-1}"
PG_URL="${WARRANT_BENCH_POSTGRES_URL-postgres://postgres@127.0.0.1:5432/test}"
MYSQL_URL="${WARRANT_BENCH_MYSQL_URL:-}"

cargo build --release --quiet -p warrant
bin="$(pwd)/${CARGO_TARGET_DIR:-target}/release/warrant"

tmp="$(mktemp -d)"
scratch_db=""
drop_scratch() {
    case "$scratch_db" in
        pg:*) psql -q "$PG_URL" -c "DROP DATABASE IF EXISTS ${scratch_db#pg:}" >/dev/null 2>&1 || true ;;
        my:*) mysql_cli -e "DROP DATABASE IF EXISTS ${scratch_db#my:}" >/dev/null 2>&1 || true ;;
    esac
    scratch_db=""
}
trap 'drop_scratch; rm -rf "$tmp"' EXIT

# mysql://user[:password]@host[:port]/db → the mysql client's flags.
mysql_cli() {
    local rest="${MYSQL_URL#*://}" userinfo hostport user pass host port
    userinfo="${rest%%@*}"
    hostport="${rest#*@}"
    hostport="${hostport%%/*}"
    user="${userinfo%%:*}"
    pass=""
    [[ "$userinfo" == *:* ]] && pass="${userinfo#*:}"
    host="${hostport%%:*}"
    port=3306
    [[ "$hostport" == *:* ]] && port="${hostport#*:}"
    MYSQL_PWD="$pass" mysql -h "$host" -P "$port" -u "$user" "$@"
}

# Sets db_args to a fresh database for one run of backend $1 (SQLite: none,
# the bench makes a temp data dir) and scratch_db to what drop_scratch drops.
fresh_db() {
    local name="warrant_cabench_$RANDOM$RANDOM"
    db_args=()
    case "$1" in
        postgres)
            scratch_db="pg:$name"
            psql -q "$PG_URL" -c "CREATE DATABASE $name" >/dev/null
            db_args=(--db "${PG_URL%/*}/$name")
            ;;
        mysql)
            scratch_db="my:$name"
            mysql_cli -e "CREATE DATABASE $name"
            db_args=(--db "${MYSQL_URL%/*}/$name")
            ;;
    esac
}

backends=(sqlite)
[[ -n "$PG_URL" ]] && backends+=(postgres)
[[ -n "$MYSQL_URL" ]] && backends+=(mysql)

echo "## CA issuance: durable vs buffered ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "Command: bench/ca-durability.sh (warrant bench --scenario $SCENARIO --duration ${SECS}s, REPS=$REPS, AGENTS=$AGENTS, CONTROL=$CONTROL, backends ${backends[*]})"
echo

results="$tmp/results.tsv"
: >"$results"
IFS=, read -r -a agent_counts <<<"$AGENTS"
for backend in "${backends[@]}"; do
    for agents in "${agent_counts[@]}"; do
        for ((rep = 1; rep <= REPS; rep++)); do
            # Rotate which run goes first, so a drift in the box's speed
            # hits each alike. "control" is a second buffered run.
            modes=(durable buffered)
            [[ "$CONTROL" != 0 ]] && modes+=(control)
            for ((k = 0; k < (rep - 1) % ${#modes[@]}; k++)); do
                modes=("${modes[@]:1}" "${modes[0]}")
            done
            for mode in "${modes[@]}"; do
                fresh_db "$backend"
                json="$tmp/run.json"
                # A durable success missing from the DB fails the bench, and
                # set -e stops the script.
                "$bin" bench --scenario "$SCENARIO" --duration "${SECS}s" \
                    --agents "$agents" --durability "${mode/control/buffered}" "${db_args[@]}" --json >"$json"
                drop_scratch
                python3 - "$json" "$backend" "$agents" "$mode" "$rep" >>"$results" <<'EOF'
import json, os, sys
path, backend, agents, mode, rep = sys.argv[1:]
t = json.load(open(path))["totals"]
cpu = t["cpu_us_per_cert"]
wait = t["durable_wait_mean_ms"]
# Share of the box's cores the server and Gust kept busy over the run.
busy = ((t["server_cpu_seconds"] or 0) + t["client_cpu_seconds"]) / t["elapsed"] / os.cpu_count()
print("\t".join([backend, agents, mode, f'{t["issued_per_sec"]:.1f}',
                 f'{t["latency_p50_ms"]:.3f}', f'{t["latency_p99_ms"]:.3f}',
                 "" if cpu is None else f"{cpu:.1f}", str(t["failures"]), rep,
                 "" if wait is None else f"{wait:.3f}", f"{busy:.3f}"]))
EOF
                tail -n1 "$results" | awk -F'\t' '{printf "  %s %s agents %s: %s certs/s, p50 %s ms, p99 %s ms, %s µs CPU/cert, %s failures\n", $1, $2, $3, $4, $5, $6, $7, $8}' >&2
            done
        done
    done
done

python3 - "$results" <<'EOF'
import statistics, sys
from collections import defaultdict

runs = defaultdict(list)
# (backend, agents) → repetition → mode → certs/s: the runs of one
# repetition ran back to back, so their ratio is free of the box's slower
# drifts, which the ratio of the medians is not. The goal is judged on the
# median of those paired ratios; the control's ratio to the same buffered
# run (A/A) is what two runs of one build give on this box.
pairs = defaultdict(lambda: defaultdict(dict))
for line in open(sys.argv[1]):
    backend, agents, mode, rate, p50, p99, cpu, failures, rep, wait, busy = line.rstrip("\n").split("\t")
    pairs[(backend, int(agents))][int(rep)][mode] = float(rate)
    if mode == "control":
        continue
    runs[(backend, int(agents), mode)].append(
        (float(rate), float(p50), float(p99), float(cpu) if cpu else None, int(failures),
         float(wait) if wait else None, float(busy)))

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

names = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}
def paired(reps, mode):
    """Each repetition's `mode` run over its buffered run."""
    return [m[mode] / m["buffered"] for _, m in sorted(reps.items())
            if m.get("buffered") and mode in m]

def spread(ratios):
    return f"{min(ratios):.0%}–{max(ratios):.0%}, median {med(ratios):.0%}" if ratios else "–"

print("| backend | agents | durable certs/s | buffered certs/s | durable / buffered | per repetition | median of the pairs | A/A control: buffered again / buffered | p50 ms (d / b) | p99 ms (d / b) | durable wait ms | cores busy (d / b) | server CPU µs/cert (d / b) | failed requests (d / b) |")
print("|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
goal = []  # (cell, met)
controls = []
for (backend, agents) in sorted({(b, a) for (b, a, _) in runs}, key=lambda k: (list(names).index(k[0]), k[1])):
    d, b = runs[(backend, agents, "durable")], runs[(backend, agents, "buffered")]
    col = lambda rs, i: med([r[i] for r in rs])
    dr, br = col(d, 0), col(b, 0)
    ratio = dr / br if br else 0.0
    cpu = lambda rs: "–" if col(rs, 3) is None else f"{col(rs, 3):.0f}"
    durable_pairs = paired(pairs[(backend, agents)], "durable")
    control_pairs = paired(pairs[(backend, agents)], "control")
    per_rep = " / ".join(f"{r:.0%}" for r in durable_pairs)
    paired_median = med(durable_pairs) or 0.0
    print(f"| {names[backend]} | {agents} | {dr:,.0f} | {br:,.0f} | {ratio:.0%} | {per_rep} | "
          f"{paired_median:.0%} | {spread(control_pairs)} | "
          f"{col(d, 1):.2f} / {col(b, 1):.2f} | {col(d, 2):.2f} / {col(b, 2):.2f} | "
          f"{'–' if col(d, 5) is None else f'{col(d, 5):.2f}'} | {col(d, 6):.0%} / {col(b, 6):.0%} | "
          f"{cpu(d)} / {cpu(b)} | {sum(r[4] for r in d)} / {sum(r[4] for r in b)} |")
    if agents >= 64:
        goal.append((f"{names[backend]} {paired_median:.0%} at {agents}", paired_median >= 0.9))
        controls += control_pairs
print()
if goal:
    met = all(ok for _, ok in goal)
    cells = ", ".join(cell for cell, _ in goal)
    print(f"Goal durable ≥ 90 % of buffered at 64+ agents, on the median of the paired ratios: "
          f"{'met' if met else 'NOT met'} ({cells}).")
    if controls:
        print(f"A/A control at 64+ agents, buffered against buffered: {spread(controls)}. "
              "A durable pair inside that range is within this box's noise.")
EOF
