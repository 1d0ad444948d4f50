#!/usr/bin/env bash
# COPY throughput over the wire: Sluice (4 partitions, fsync on) against
# PostgreSQL 15 (UNLOGGED table), same rows, same client (psql \copy), same run.
#
#   bash benches/copy_vs_postgres.sh [rows]      (default 5000000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-5000000}"
WORK="$(mktemp -d /tmp/sluice-bench.XXXXXX)"
SLUICE_PORT=5475
PG_PORT=5476
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

if ! command -v pg_ctl >/dev/null && [ ! -x /usr/lib/postgresql/15/bin/pg_ctl ]; then
  apt-get update -qq && apt-get install -y -qq postgresql-15 >/dev/null
fi
PGBIN=/usr/lib/postgresql/15/bin

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"

echo "generating $ROWS rows"
python3 benches/gen_usage.py "$ROWS" "$WORK/usage.csv"
ls -la "$WORK/usage.csv"

cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  [ -d "$WORK/pg" ] && su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- Sluice ---
"$SLUICE" serve --listen 127.0.0.1:$SLUICE_PORT --data-dir "$WORK/sluice" 2>"$WORK/sluice.log" &
SLUICE_PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"
t0=$(date +%s.%N)
psql -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
t1=$(date +%s.%N)
COUNT=$(psql -tA -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "SELECT COUNT(*) FROM usage")
[ "$COUNT" = "$ROWS" ] || { echo "sluice has $COUNT rows, expected $ROWS"; exit 1; }
SLUICE_RSS=$(ps -o rss= -p $SLUICE_PID)
kill $SLUICE_PID; wait $SLUICE_PID 2>/dev/null || true; SLUICE_PID=

# --- PostgreSQL 15, UNLOGGED table ---
mkdir -p "$WORK/pg"; chown postgres "$WORK" "$WORK/pg"; chmod 755 "$WORK"; chmod 644 "$WORK/usage.csv"
su postgres -c "$PGBIN/initdb -D $WORK/pg -A trust -U postgres" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1' -l $WORK/pg.log start" >/dev/null
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PG_PORT -U postgres -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p $PG_PORT -U postgres -c "CREATE UNLOGGED TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP)"
t2=$(date +%s.%N)
psql -q -h 127.0.0.1 -p $PG_PORT -U postgres -c "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
t3=$(date +%s.%N)
PGCOUNT=$(psql -tA -h 127.0.0.1 -p $PG_PORT -U postgres -c "SELECT COUNT(*) FROM usage")
[ "$PGCOUNT" = "$ROWS" ] || { echo "postgres has $PGCOUNT rows"; exit 1; }

python3 - "$ROWS" "$t0" "$t1" "$t2" "$t3" "$SLUICE_RSS" <<'PY'
import sys
rows = int(sys.argv[1]); t0, t1, t2, t3 = map(float, sys.argv[2:6]); rss = int(sys.argv[6])
s, p = rows / (t1 - t0), rows / (t3 - t2)
print(f"| rows | Sluice COPY rows/s | PostgreSQL 15 UNLOGGED COPY rows/s | ratio | Sluice RSS after load |")
print(f"|---|---|---|---|---|")
print(f"| {rows:,} | {s:,.0f} ({t1 - t0:.2f} s) | {p:,.0f} ({t3 - t2:.2f} s) | {s / p:.2f}x | {rss / 1024:.0f} MiB |")
PY
