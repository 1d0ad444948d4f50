#!/usr/bin/env bash
# Views with many groups: N events into G distinct user ids (13-byte keys),
# `SELECT user_id, COUNT(*), SUM(tokens), MIN(tokens), MAX(tokens) ... GROUP BY
# user_id`, backfilled by Sluice and computed as one batch GROUP BY by DuckDB
# over the same rows, in the same run. Then the windows benchmark's TUMBLE
# view (50 tenants, 1-minute windows) over the usage rows of
# benches/gen_usage.py.
#
# Reports the view's backfill (CREATE MATERIALIZED VIEW to FLUSH) in events
# per CPU-second of the server (from /proc/<pid>/stat around it), the
# server's memory per group (RSS after FLUSH less RSS before CREATE, and
# again 3 s later, once the memory the backfill's checkpoint freed has gone
# back to the system), and the groups and state bytes the view reports in
# sluice_catalog.view_operators.
#
#   bash benches/high_cardinality.sh [events] [groups]   (default 10000000 2000000)
#   SLUICE_BIN=/path/to/sluice   compares another build of the server
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-10000000}"
NGROUPS="${2:-2000000}"
WORK="$(mktemp -d /tmp/sluice-groups.XXXXXX)"
PORT=5479
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb

if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
  SLUICE_BIN="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
fi
# Segments large enough that none closes: a closed segment moves to the
# object store as Parquet in the background, and that work would be
# counted in whichever backfill it overlaps.
SERVE_ARGS="--segment-bytes 8589934592"
cleanup() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 - "$EVENTS" "$NGROUPS" "$WORK/events.csv" <<'PY'
import sys, duckdb
n, g, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
duckdb.connect().execute(f"""
  COPY (SELECT 'user_' || lpad(((i * 7919) % {g})::VARCHAR, 8, '0') AS user_id,
               (i * 31) % 1000 AS tokens
        FROM range({n}) t(i)) TO '{path}' (HEADER false)""")
PY
python3 benches/gen_usage.py "$EVENTS" "$WORK/usage.csv" >/dev/null

"$SLUICE_BIN" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" --http-listen off $SERVE_ARGS 2>"$WORK/sluice.log" &
PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PORT -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
q() { psql -X -qtA -h 127.0.0.1 -p $PORT -c "$1"; }
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
sys() { awk '{print $15}' "/proc/$PID/stat"; }
rss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$PID/status"; }
TICKS=$(getconf CLK_TCK)

q "CREATE TABLE ev (user_id TEXT, tokens BIGINT) APPEND ONLY WITH (partitions = 4)"
q "\\copy ev FROM '$WORK/events.csv' WITH (FORMAT csv)"
q "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP, WATERMARK FOR event_time AS event_time - INTERVAL '10 seconds') APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"
q "\\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
# A fresh server process, so that memory COPY held is not in the baseline.
kill "$PID"; wait "$PID" 2>/dev/null || true
"$SLUICE_BIN" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" --http-listen off $SERVE_ARGS 2>>"$WORK/sluice.log" &
PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PORT -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done

# backfill NAME SQL: wall seconds, CPU seconds, RSS growth, groups, state
# bytes, RSS growth 3 s after FLUSH.
backfill() {
  local name=$1 sql=$2
  local c0 r0 t0 t1 c1 r1 r2 s0 s1
  r0=$(rss); c0=$(cpu); s0=$(sys); t0=$(date +%s.%N)
  q "CREATE MATERIALIZED VIEW $name AS $sql"
  q "FLUSH"
  t1=$(date +%s.%N); c1=$(cpu); s1=$(sys); r1=$(rss)
  local stats
  stats=$(q "SELECT state_rows, state_bytes FROM sluice_catalog.view_operators WHERE view_name = '$name' AND kind = 'aggregate'")
  sleep 3
  r2=$(rss)
  echo "$(echo "$t1 - $t0" | bc) $(echo "($c1 - $c0) / $TICKS" | bc -l) $((r1 - r0)) ${stats//|/ } $((r2 - r0)) $(echo "($s1 - $s0) / $TICKS" | bc -l)"
}

duck() {
  python3 - "$1" "$2" <<'PY'
import sys, time, duckdb
path, sql = sys.argv[1], sys.argv[2]
con = duckdb.connect()
if 'usage' in path:
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{path}', header=false, columns={{'event_id':'VARCHAR','tenant':'VARCHAR','tokens':'BIGINT','event_time':'TIMESTAMP'}})")
else:
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{path}', header=false, columns={{'user_id':'VARCHAR','tokens':'BIGINT'}})")
t = time.time()
con.execute(f"CREATE TABLE r AS {sql}")
print(time.time() - t)
PY
}

read -r HW HC HR HG HB HS HK <<<"$(backfill per_user "SELECT user_id, COUNT(*) AS n, SUM(tokens) AS tokens, MIN(tokens) AS lo, MAX(tokens) AS hi FROM ev GROUP BY user_id")"
VIEW_ROWS=$(q "SELECT COUNT(*) FROM per_user")
[ "$VIEW_ROWS" = "$NGROUPS" ] || { echo "per_user has $VIEW_ROWS rows, expected $NGROUPS"; exit 1; }
SUM_N=$(q "SELECT SUM(n) FROM per_user")
[ "$SUM_N" = "$EVENTS" ] || { echo "per_user counts $SUM_N events"; exit 1; }
HD=$(duck "$WORK/events.csv" "SELECT user_id, COUNT(*), SUM(tokens), MIN(tokens), MAX(tokens) FROM t GROUP BY user_id")
q "DROP MATERIALIZED VIEW per_user"

read -r TW TC TR TG TB TS TK <<<"$(backfill per_minute "SELECT tenant, window_start, window_end, SUM(tokens) AS tokens, COUNT(*) AS events FROM TUMBLE(usage, event_time, INTERVAL '1 minute') GROUP BY tenant, window_start, window_end")"
TD=$(duck "$WORK/usage.csv" "SELECT tenant, time_bucket(INTERVAL '1 minute', event_time) AS ws, SUM(tokens), COUNT(*) FROM t GROUP BY ALL")

python3 - "$EVENTS" "$NGROUPS" "$HW" "$HC" "$HR" "$HG" "$HB" "$HS" "$HK" "$HD" "$TW" "$TC" "$TR" "$TG" "$TB" "$TS" "$TK" "$TD" <<'PY'
import sys
a = sys.argv[1:]
events, groups = int(a[0]), int(a[1])
print("| view | Sluice backfill (wall) | Sluice events per CPU-second | DuckDB batch GROUP BY | RSS growth per group at FLUSH | 3 s later | groups held at FLUSH | state bytes per group (reported) |")
print("|---|---|---|---|---|---|---|---|")
for name, w, c, r, g, b, s, k, d, per in [
    (f"{events:,} events into {groups:,} user ids: COUNT, SUM, MIN, MAX", *a[2:10], groups),
    ("TUMBLE 1 minute, SUM/COUNT per tenant", *a[10:18], None),
]:
    w, c, r, g, b, s, k, d = float(w), float(c), int(r), int(g), int(b), int(s), float(k), float(d)
    per_group = f"{r / per:,.0f} B" if per else "-"
    settled = f"{s / per:,.0f} B" if per else "-"
    per_state = f"{b / g:,.0f} B" if g else "-"
    print(f"| {name} | {w:.2f} s ({events / w:,.0f} events/s) | {events / c:,.0f} ({c:.2f} CPU-s, {k:.2f} of them system) | {d:.2f} s ({events / d:,.0f} events/s) | {per_group} | {settled} | {g:,} | {per_state} |")
PY
