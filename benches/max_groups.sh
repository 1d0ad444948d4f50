#!/usr/bin/env bash
# How many groups a view holds in how much memory: for each G given, a
# fresh server loads G events with G distinct user ids (13-byte keys, as in
# benches/high_cardinality.sh, with nine digits so that G may pass 10^8), backfills
# `SELECT user_id, COUNT(*), SUM(tokens), MIN(tokens), MAX(tokens) ... GROUP
# BY user_id`, and reports the server's resident memory after FLUSH and its
# peak (VmHWM) over the whole backfill and checkpoint, its resident memory
# 3 s after FLUSH (once the memory the checkpoint freed has gone back to
# the system), with the state bytes the view reports. Segments are large
# enough that none closes: a closed segment moves to the object store in
# the background, and that would count in the backfill's memory.
#
#   bash benches/max_groups.sh 10000000 20000000 30000000
#   SLUICE_BIN=/path/to/sluice   measures another build of the server
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=5480
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
  SLUICE_BIN="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
fi
WORK="$(mktemp -d /tmp/sluice-maxgroups.XXXXXX)"
cleanup() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
q() { psql -X -qtA -h 127.0.0.1 -p $PORT -c "$1"; }
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$PID/status"; }
start() {
  "$SLUICE_BIN" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" --http-listen off --segment-bytes 8589934592 2>>"$WORK/sluice.log" &
  PID=$!
  for _ in $(seq 300); do psql -h 127.0.0.1 -p $PORT -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
}

echo "| groups | RSS before | RSS after FLUSH | 3 s later | peak RSS (VmHWM) | peak per group | growth per group 3 s after FLUSH | state bytes per group (reported) | backfill (wall) |"
echo "|---|---|---|---|---|---|---|---|---|"
for G in "$@"; do
  rm -rf "$WORK/data" "$WORK"/events.*.csv
  # In files of 50M rows: one COPY statement stages at most 4 GiB.
  python3 - "$G" "$WORK" <<'PY'
import sys, duckdb
g, work = int(sys.argv[1]), sys.argv[2]
con = duckdb.connect()
for n, first in enumerate(range(0, g, 50_000_000)):
    con.execute(f"""
      COPY (SELECT 'user' || lpad(((i * 7919) % {g})::VARCHAR, 9, '0') AS user_id,
                   (i * 31) % 1000 AS tokens
            FROM range({first}, {min(g, first + 50_000_000)}) t(i))
      TO '{work}/events.{n:03}.csv' (HEADER false)""")
PY
  start
  q "CREATE TABLE ev (user_id TEXT, tokens BIGINT) APPEND ONLY WITH (partitions = 4)"
  for f in "$WORK"/events.*.csv; do
    q "\\copy ev FROM '$f' WITH (FORMAT csv)"
    rm -f "$f"
  done
  # A fresh process, so that neither COPY's memory nor its peak counts.
  kill "$PID"; wait "$PID" 2>/dev/null || true
  start
  R0=$(kib VmRSS); T0=$(date +%s.%N)
  q "CREATE MATERIALIZED VIEW per_user AS SELECT user_id, COUNT(*) AS n, SUM(tokens) AS tokens, MIN(tokens) AS lo, MAX(tokens) AS hi FROM ev GROUP BY user_id"
  q "FLUSH"
  T1=$(date +%s.%N); R1=$(kib VmRSS); HWM=$(kib VmHWM)
  ROWS=$(q "SELECT COUNT(*) FROM per_user")
  [ "$ROWS" = "$G" ] || { echo "per_user has $ROWS rows, expected $G"; exit 1; }
  STATE=$(q "SELECT state_bytes FROM sluice_catalog.view_operators WHERE view_name = 'per_user' AND kind = 'aggregate'")
  sleep 3
  R2=$(kib VmRSS)
  python3 - "$G" "$R0" "$R1" "$HWM" "$STATE" "$R2" "$T0" "$T1" <<'PY'
import sys
g, r0, r1, hwm, state, r2 = (int(x) for x in sys.argv[1:7])
t0, t1 = float(sys.argv[7]), float(sys.argv[8])
gib = lambda k: f"{k / 1024 / 1024:.2f} GiB"
print(f"| {g:,} | {gib(r0)} | {gib(r1)} | {gib(r2)} | {gib(hwm)} | {hwm * 1024 / g:,.0f} B | {(r2 - r0) * 1024 / g:,.0f} B | {state / g:,.0f} B | {t1 - t0:.1f} s |")
PY
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
done
