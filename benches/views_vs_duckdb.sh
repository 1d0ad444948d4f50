#!/usr/bin/env bash
# Materialized-view throughput: Sluice backfilling views over N usage events
# (4 partitions, 50 tenants, event times a few seconds out of order) against
# DuckDB computing the same results as batch GROUP BY queries over the same
# rows, in the same run.
#
#   bash benches/views_vs_duckdb.sh [events]      (default 10000000)
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-10000000}"
WORK="$(mktemp -d /tmp/sluice-views.XXXXXX)"
PORT=5477
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
cleanup() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "generating $EVENTS events"
python3 benches/gen_usage.py "$EVENTS" "$WORK/usage.csv"

"$SLUICE" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" 2>"$WORK/sluice.log" &
PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PORT -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
q() { psql -qtA -h 127.0.0.1 -p $PORT -c "$1"; }
q "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP, WATERMARK FOR event_time AS event_time - INTERVAL '10 seconds') APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"
q "\\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"

declare -A VIEWS=(
  [tumble]="SELECT tenant, window_start, window_end, SUM(tokens) AS tokens, COUNT(*) AS events FROM TUMBLE(usage, event_time, INTERVAL '1 minute') GROUP BY tenant, window_start, window_end"
  [hop]="SELECT tenant, window_start, window_end, SUM(tokens) AS tokens, COUNT(*) AS events FROM HOP(usage, event_time, INTERVAL '10 seconds', INTERVAL '1 minute') GROUP BY tenant, window_start, window_end"
  [unwindowed]="SELECT tenant, SUM(tokens) AS tokens FROM usage GROUP BY tenant"
)
declare -A DUCK=(
  [tumble]="SELECT tenant, time_bucket(INTERVAL '1 minute', event_time) AS ws, SUM(tokens), COUNT(*) FROM usage GROUP BY ALL"
  [hop]="SELECT tenant, ws, SUM(tokens), COUNT(*) FROM (SELECT *, UNNEST(generate_series(time_bucket(INTERVAL '10 seconds', event_time - INTERVAL '1 minute') + INTERVAL '10 seconds', time_bucket(INTERVAL '10 seconds', event_time), INTERVAL '10 seconds')) AS ws FROM usage) GROUP BY ALL"
  [unwindowed]="SELECT tenant, SUM(tokens) FROM usage GROUP BY tenant"
)

echo "| view | Sluice events/s (backfill to FLUSH) | DuckDB events/s (batch GROUP BY) | ratio | Sluice RSS |"
echo "|---|---|---|---|---|"
for v in tumble hop unwindowed; do
  t0=$(date +%s.%N)
  q "CREATE MATERIALIZED VIEW v_$v AS ${VIEWS[$v]}"
  q "FLUSH"
  t1=$(date +%s.%N)
  rss=$(ps -o rss= -p $PID)
  d=$(python3 - "$WORK/usage.csv" "${DUCK[$v]}" <<'PY'
import sys, time, duckdb
con = duckdb.connect()
con.execute(f"CREATE TABLE usage AS SELECT * FROM read_csv('{sys.argv[1]}', header=false, columns={{'event_id':'VARCHAR','tenant':'VARCHAR','tokens':'BIGINT','event_time':'TIMESTAMP'}})")
t = time.time()
con.execute(sys.argv[2]).fetchall()
print(time.time() - t)
PY
)
  python3 - "$EVENTS" "$t0" "$t1" "$d" "$rss" "$v" <<'PY'
import sys
n = int(sys.argv[1]); t0, t1, d = map(float, sys.argv[2:5]); rss = int(sys.argv[5]); v = sys.argv[6]
s = n / (t1 - t0); k = n / d
print(f"| {v} | {s:,.0f} ({t1 - t0:.2f} s) | {k:,.0f} ({d:.2f} s) | {s / k:.2f}x | {rss / 1024:.0f} MiB |")
PY
  q "DROP MATERIALIZED VIEW v_$v"
done
