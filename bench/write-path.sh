#!/usr/bin/env bash
# Write-path benchmark (issue 4): committed rows/s, durable vs buffered, at
# 1, 64 and 512 concurrent issuers, on SQLite (a temp dir) and PostgreSQL (a
# scratch database created and dropped by the benchmark), optionally MariaDB.
# Prints a Markdown table of medians with the durable/buffered ratio, whether
# SQLite durable reaches the goal of 20 000 rows/s, and how far the store
# alone is from 90 % of buffered (the issue's 90 % goal is judged on issued
# certificates, bench/ca-durability.sh). Not a timed test: run it by hand on
# a quiet box.
#
#   bench/write-path.sh
#   REPS=5 SECS=3 CONC=64,512 bench/write-path.sh
#   PREFILL=1000000 REPS=2 SECS=4 CONC=64,512 bench/write-path.sh   # large tables
#   WARRANT_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3306/test bench/write-path.sh
#
# Environment:
#   WARRANT_BENCH_POSTGRES_URL  server to bench on (default
#                               postgres://postgres@127.0.0.1:5432/test; "" skips)
#   WARRANT_BENCH_MYSQL_URL     MariaDB/MySQL server (unset: skipped)
#   REPS (3), SECS (2), CONC (1,64,512), COMMITTERS (store default)
#   PREFILL                     rows (certificates and nonces) put in each
#                               fresh database before its run, untimed
#                               (SQLite and PostgreSQL; unset: empty tables)
#   CARGO_TARGET_DIR            where the release example is built
set -euo pipefail

cd "$(dirname "$0")/.."

REPS="${REPS:-3}"
SECS="${SECS:-2}"
CONC="${CONC:-1,64,512}"
PG_URL="${WARRANT_BENCH_POSTGRES_URL-postgres://postgres@127.0.0.1:5432/test}"
MYSQL_URL="${WARRANT_BENCH_MYSQL_URL:-}"

backends="sqlite"
args=(--secs "$SECS" --reps "$REPS" --conc "$CONC")
if [[ -n "$PG_URL" ]]; then
    backends+=",postgres"
    args+=(--postgres-url "$PG_URL")
fi
if [[ -n "$MYSQL_URL" ]]; then
    backends+=",mysql"
    args+=(--mysql-url "$MYSQL_URL")
fi
if [[ -n "${PREFILL:-}" ]]; then
    args+=(--prefill "$PREFILL")
fi
if [[ -n "${COMMITTERS:-}" ]]; then
    args+=(--committers "$COMMITTERS")
fi

cargo build --release --quiet -p warrant-store --example write_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/write_bench"

# SQLite databases (and the fsync probe) live in a private temp dir.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "## Write path: durable vs buffered ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "Command: bench/write-path.sh (write_bench ${args[*]} --backends $backends)"
echo
# Per-repetition figures go to stderr; the table and goal lines to stdout.
# The ratio is what to compare across runs on a shared box.
TMPDIR="$tmp" "$bin" "${args[@]}" --backends "$backends"
