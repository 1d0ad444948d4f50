#!/usr/bin/env bash
# Recovery after SIGKILL and the cost of checkpoints.
#
# 1. Loads N usage events (4 partitions, 50 tenants) with two views
#    following (per-tenant SUM/COUNT, and a 1-minute TUMBLE per tenant),
#    once with checkpoints every second and once with checkpoints only at
#    FLUSH, and reports ingest and view throughput for both.
# 2. After FLUSH (views checkpointed), kills the server with SIGKILL and
#    times a restart: process start to the first successful query of each
#    view. For comparison, the same restart with the views' checkpoints
#    deleted, timed until the views have caught up (FLUSH returns).
#
#   bash benches/recovery.sh [events]      (default 10000000)
#   MODES="flush-only every-1s" bash benches/recovery.sh   (other order)
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-10000000}"
WORK="$(mktemp -d /tmp/sluice-recovery.XXXXXX)"
PORT=5478
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
cleanup() {
  [ -n "${PID:-}" ] && kill -9 "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "generating $EVENTS events" >&2
python3 benches/gen_usage.py "$EVENTS" "$WORK/usage.csv"

q() { psql -qtAX -h 127.0.0.1 -p $PORT -c "$1"; }
now() { date +%s.%N; }
start_server() { # data dir, checkpoint interval ms
  "$SLUICE" serve --listen 127.0.0.1:$PORT --data-dir "$1" --checkpoint-interval-ms "$2" ${EXTRA:-} 2>>"$WORK/sluice.log" &
  PID=$!
  until q 'SELECT 1' >/dev/null 2>&1; do sleep 0.01; done
}

setup="CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP,
         WATERMARK FOR event_time AS event_time - INTERVAL '10 seconds')
       APPEND ONLY WITH (partitions = 4, partition_key = 'tenant');
     CREATE MATERIALIZED VIEW by_tenant AS SELECT tenant, SUM(tokens) AS tokens, COUNT(*) AS events FROM usage GROUP BY tenant;
     CREATE MATERIALIZED VIEW per_minute AS SELECT tenant, window_start, SUM(tokens) AS tokens, COUNT(*) AS events
       FROM TUMBLE(usage, event_time, INTERVAL '1 minute') GROUP BY tenant, window_start, window_end;"

echo "| checkpoints | load (COPY) rows/s | load + views caught up (FLUSH) events/s | checkpoint epochs |"
echo "|---|---|---|---|"
for mode in ${MODES:-every-1s flush-only}; do
  interval=1000; [ "$mode" = flush-only ] && interval=86400000
  rm -rf "$WORK/data"
  start_server "$WORK/data" $interval
  psql -qX -h 127.0.0.1 -p $PORT -c "$setup" >/dev/null
  t0=$(now)
  q "\\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)" >/dev/null
  t1=$(now)
  q "FLUSH" >/dev/null
  t2=$(now)
  epochs=$(q "SELECT COUNT(*) FROM sluice_catalog.checkpoints WHERE error IS NULL")
  python3 - "$EVENTS" "$t0" "$t1" "$t2" "$mode" "$epochs" <<'PY'
import sys
n, t0, t1, t2 = int(sys.argv[1]), *map(float, sys.argv[2:5])
print(f"| {sys.argv[5]} | {n/(t1-t0):,.0f} | {n/(t2-t0):,.0f} | {sys.argv[6]} |")
PY
  kill -9 $PID; wait $PID 2>/dev/null || true; PID=
done

# Recovery: the last server killed holds N rows with both views
# checkpointed at FLUSH.
echo
echo "| restart after SIGKILL | by_tenant first query ms | per_minute first query ms | caught up (FLUSH) ms |"
echo "|---|---|---|---|"
for mode in from-checkpoint without-checkpoint; do
  [ "$mode" = without-checkpoint ] && rm -rf "$WORK/data/objects/views"
  t0=$(now)
  "$SLUICE" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" 2>>"$WORK/sluice.log" &
  PID=$!
  until q "SELECT COUNT(*) FROM by_tenant" >/dev/null 2>&1; do sleep 0.005; done
  t1=$(now)
  until q "SELECT COUNT(*) FROM per_minute" >/dev/null 2>&1; do sleep 0.005; done
  t2=$(now)
  q "FLUSH" >/dev/null
  t3=$(now)
  total=$(q "SELECT SUM(events) FROM by_tenant")
  [ "$total" = "$EVENTS" ] || { echo "by_tenant holds $total events, expected $EVENTS" >&2; exit 1; }
  python3 - "$t0" "$t1" "$t2" "$t3" "$mode" <<'PY'
import sys
t0, t1, t2, t3 = map(float, sys.argv[1:5])
ms = lambda t: f"{(t - t0) * 1000:,.0f}"
print(f"| {sys.argv[5]} | {ms(t1)} | {ms(t2)} | {ms(t3)} |")
PY
  kill -9 $PID; wait $PID 2>/dev/null || true; PID=
done
