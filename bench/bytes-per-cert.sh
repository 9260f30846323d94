#!/usr/bin/env bash
# Bytes on disk per stored agent certificate (issue 32), per backend, with
# `storage.agent_cert_der = "keep"` and `"drop"` side by side, and their
# ratio. Each run issues agent certificates through the whole server
# (`warrant bench -scenario aic`, each with its DA nonce) into a fresh
# database; every row is unexpired, so the figure is the database's size
# over its unexpired agent rows, nonce rows and every index included:
#
#   SQLite      the file after a TRUNCATE checkpoint (no WAL)
#   PostgreSQL  pg_total_relation_size of the warrant_* tables, after VACUUM
#   MariaDB     data_length + index_length of the database, after ANALYZE
#
# Not a timed test: run it by hand.
#
#   bench/bytes-per-cert.sh
#   SECS=30 QPS=3000 bench/bytes-per-cert.sh
#
# Environment:
#   WARRANT_BENCH_POSTGRES_URL  server (default postgres://postgres@127.0.0.1:5432;
#                               "" skips); needs psql
#   WARRANT_BENCH_MYSQL_URL     server (default mysql://root@127.0.0.1:3306; "" skips);
#                               needs the mysql client
#   SECS (20), QPS (3000), AGENTS (300), USERS (100)
#   WARRANT                     the binary (default: the release build under
#                               $CARGO_TARGET_DIR, else ./target)
set -euo pipefail
cd "$(dirname "$0")/.."

SECS="${SECS:-20}"
QPS="${QPS:-3000}"
AGENTS="${AGENTS:-300}"
USERS="${USERS:-100}"
PG="${WARRANT_BENCH_POSTGRES_URL-postgres://postgres@127.0.0.1:5432}"
MY="${WARRANT_BENCH_MYSQL_URL-mysql://root@127.0.0.1:3306}"
WARRANT="${WARRANT:-${CARGO_TARGET_DIR:-target}/release/warrant}"
[ -x "$WARRANT" ] || { echo "build first: cargo build --release -p warrant ($WARRANT)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "needs sqlite3" >&2; exit 2; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

issue() { # mode dsn
  WARRANT_STORAGE_AGENT_CERT_DER="$1" "$WARRANT" bench -scenario aic -qps "$QPS" \
    -duration "${SECS}s" -agents "$AGENTS" -users "$USERS" -db "$2" -json >/dev/null
}

sqlite_bytes() { # mode -> "rows bytes"
  local db="$TMP/$1.db"
  issue "$1" "$db"
  sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  echo "$(sqlite3 "$db" 'SELECT COUNT(*) FROM warrant_certs WHERE agent_id IS NOT NULL') $(stat -c %s "$db")"
}

pg_bytes() {
  local db="warrant_bpc_$1"
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  issue "$1" "$PG/$db"
  psql "$PG/$db" -qAtc "VACUUM ANALYZE" >/dev/null
  psql "$PG/$db" -qAtF ' ' -c "SELECT (SELECT COUNT(*) FROM warrant_certs WHERE agent_id IS NOT NULL), \
    (SELECT SUM(pg_total_relation_size(oid)) FROM pg_class WHERE relkind = 'r' AND relname LIKE 'warrant_%')"
  psql "$PG/postgres" -qc "DROP DATABASE $db" >/dev/null
}

my_bytes() {
  local db="warrant_bpc_$1" hp="${MY#mysql://}"
  local user="${hp%%@*}" host="${hp#*@}"; host="${host%%/*}"
  local cli=(mysql -u"$user" -h"${host%:*}" -P"${host#*:}" -N)
  "${cli[@]}" -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
  issue "$1" "$MY/$db"
  "${cli[@]}" "$db" -e "ANALYZE TABLE warrant_certs, warrant_da_nonces" >/dev/null
  echo "$("${cli[@]}" "$db" -e 'SELECT COUNT(*) FROM warrant_certs WHERE agent_id IS NOT NULL') \
$("${cli[@]}" -e "SELECT SUM(data_length + index_length) FROM information_schema.tables WHERE table_schema = '$db'")"
  "${cli[@]}" -e "DROP DATABASE $db"
}

echo "| backend | keep: rows | keep: B/cert | drop: rows | drop: B/cert | drop/keep |"
echo "|---|---|---|---|---|---|"
for backend in sqlite pg my; do
  case "$backend" in
    pg) [ -n "$PG" ] || continue; name=PostgreSQL ;;
    my) [ -n "$MY" ] || continue; name=MariaDB ;;
    sqlite) name=SQLite ;;
  esac
  read -r kr kb < <("${backend}_bytes" keep)
  read -r dr db < <("${backend}_bytes" drop)
  awk -v n="$name" -v kr="$kr" -v kb="$kb" -v dr="$dr" -v db="$db" 'BEGIN {
    k = kb / kr; d = db / dr
    printf "| %s | %d | %.0f | %d | %.0f | %.2f |\n", n, kr, k, dr, d, d / k }'
done
