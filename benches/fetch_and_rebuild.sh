#!/usr/bin/env bash
# Subscription FETCH throughput (one group, then four groups at once) and
# view REBUILD throughput, against PostgreSQL 15 in the same run: the same
# rows, the same client (psql). PostgreSQL reads through a cursor
# (DECLARE c CURSOR FOR SELECT * FROM usage) and rebuilds with REFRESH
# MATERIALIZED VIEW.
#
#   bash benches/fetch_and_rebuild.sh [rows]      (default 10000000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-10000000}"
BATCH=10000
WORK="$(mktemp -d /tmp/sluice-bench.XXXXXX)"
SLUICE_PORT=5485
PG_PORT=5486
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort | tail -1)

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"

echo "generating $ROWS rows"
python3 benches/gen_usage.py "$ROWS" "$WORK/usage.csv"

cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  [ -d "$WORK/pg" ] && su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

FETCHES=$((ROWS / BATCH + 2))
now() { date +%s.%N; }

# A psql script of FETCHes for one cursor: $1 = prologue, $2 = epilogue.
fetch_script() {
  echo "$1"
  for _ in $(seq $FETCHES); do echo "FETCH $BATCH FROM c;"; done
  echo "$2"
}

# --- Sluice ---
"$SLUICE" serve --listen 127.0.0.1:$SLUICE_PORT --data-dir "$WORK/sluice" 2>"$WORK/sluice.log" &
SLUICE_PID=$!
S="psql -X -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b"
for _ in $(seq 100); do $S -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
$S -c "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"
$S -c "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
for g in 1 2 3 4 5 6; do $S -c "CREATE SUBSCRIPTION g$g FROM usage"; done

fetch_script "DECLARE c SUBSCRIPTION CURSOR FOR g1;" "" > "$WORK/s1.sql"
t0=$(now); $S -At -o /dev/null -f "$WORK/s1.sql"; t1=$(now)
LAG=$($S -At -c "SELECT SUM(lag_records) FROM sluice_catalog.lag WHERE consumer = 'g1'")
[ "$LAG" = "0" ] || { echo "g1 still lags by $LAG"; exit 1; }

for g in 2 3 4 5; do fetch_script "DECLARE c SUBSCRIPTION CURSOR FOR g$g;" "" > "$WORK/s$g.sql"; done
t2=$(now)
PIDS=()
for g in 2 3 4 5; do $S -At -o /dev/null -f "$WORK/s$g.sql" & PIDS+=($!); done
wait "${PIDS[@]}"
t3=$(now)
LAG=$($S -At -c "SELECT SUM(lag_records) FROM sluice_catalog.lag WHERE consumer IN ('g2', 'g3', 'g4', 'g5')")
[ "$LAG" = "0" ] || { echo "groups still lag by $LAG"; exit 1; }

# Binary results: asyncpg, 10,000 rows per FETCH, in one transaction.
read -r SB_ROWS SB_SECS <<<"$(python3 benches/fetch_binary.py $SLUICE_PORT b "DECLARE c SUBSCRIPTION CURSOR FOR g6")"
[ "$SB_ROWS" = "$ROWS" ] || { echo "binary FETCH read $SB_ROWS rows"; exit 1; }

$S -c "CREATE MATERIALIZED VIEW by_tenant AS SELECT tenant, SUM(tokens) AS tokens, COUNT(*) AS events FROM usage GROUP BY tenant"
$S -c "FLUSH"
t4=$(now); $S -c "ALTER MATERIALIZED VIEW by_tenant REBUILD" 2>/dev/null; t5=$(now)
SUM_S=$($S -At -c "SELECT SUM(events) FROM by_tenant")
[ "$SUM_S" = "$ROWS" ] || { echo "rebuilt view counts $SUM_S"; exit 1; }
kill $SLUICE_PID; wait $SLUICE_PID 2>/dev/null || true; SLUICE_PID=

# --- PostgreSQL ---
mkdir -p "$WORK/pg"; chown postgres "$WORK" "$WORK/pg"; chmod 755 "$WORK"; chmod 644 "$WORK/usage.csv"
su postgres -c "$PGBIN/initdb -D $WORK/pg -A trust -U postgres" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1' -l $WORK/pg.log start" >/dev/null
P="psql -X -q -h 127.0.0.1 -p $PG_PORT -U postgres"
for _ in $(seq 100); do $P -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
$P -c "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP)"
$P -c "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
$P -c "VACUUM ANALYZE usage"
fetch_script "BEGIN; DECLARE c CURSOR FOR SELECT * FROM usage;" "COMMIT;" > "$WORK/p.sql"
t6=$(now); $P -At -o /dev/null -f "$WORK/p.sql"; t7=$(now)
t8=$(now)
PIDS=()
for g in 2 3 4 5; do $P -At -o /dev/null -f "$WORK/p.sql" & PIDS+=($!); done
wait "${PIDS[@]}"
t9=$(now)
read -r PB_ROWS PB_SECS <<<"$(python3 benches/fetch_binary.py $PG_PORT postgres "DECLARE c CURSOR FOR SELECT * FROM usage")"
[ "$PB_ROWS" = "$ROWS" ] || { echo "PostgreSQL binary FETCH read $PB_ROWS rows"; exit 1; }
$P -c "CREATE MATERIALIZED VIEW by_tenant AS SELECT tenant, SUM(tokens) AS tokens, COUNT(*) AS events FROM usage GROUP BY tenant"
t10=$(now); $P -c "REFRESH MATERIALIZED VIEW by_tenant"; t11=$(now)

python3 - "$ROWS" "$SB_SECS" "$PB_SECS" "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" "$t6" "$t7" "$t8" "$t9" "$t10" "$t11" <<'PY'
import sys
rows = int(sys.argv[1]); sb, pb = float(sys.argv[2]), float(sys.argv[3]); t = list(map(float, sys.argv[4:]))
s1, s4, sr = rows / (t[1] - t[0]), 4 * rows / (t[3] - t[2]), rows / (t[5] - t[4])
p1, p4, pr = rows / (t[7] - t[6]), 4 * rows / (t[9] - t[8]), rows / (t[11] - t[10])
print("| rows | measure | Sluice rows/s | PostgreSQL 15 rows/s | ratio |")
print("|---|---|---|---|---|")
print(f"| {rows:,} | FETCH {10000:,} at a time, 1 group | {s1:,.0f} ({t[1]-t[0]:.2f} s) | {p1:,.0f} ({t[7]-t[6]:.2f} s) | {s1/p1:.2f}x |")
print(f"| {rows:,} | FETCH, binary results (asyncpg) | {rows/sb:,.0f} ({sb:.2f} s) | {rows/pb:,.0f} ({pb:.2f} s) | {pb/sb:.2f}x |")
print(f"| {rows:,} | FETCH, 4 groups at once (total) | {s4:,.0f} ({t[3]-t[2]:.2f} s) | {p4:,.0f} ({t[9]-t[8]:.2f} s) | {s4/p4:.2f}x |")
print(f"| {rows:,} | REBUILD vs REFRESH MATERIALIZED VIEW | {sr:,.0f} ({t[5]-t[4]:.2f} s) | {pr:,.0f} ({t[11]-t[10]:.2f} s) | {sr/pr:.2f}x |")
PY
