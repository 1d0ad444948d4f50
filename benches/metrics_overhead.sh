#!/usr/bin/env bash
# What the HTTP endpoint costs: COPY throughput and view freshness with
# --http-listen off, and with it on and scraped every second, alternating
# ROUNDS times on fresh servers, same rows (benches/gen_usage.py), psql \copy.
#
#   bash benches/metrics_overhead.sh [rows] [rounds]     (default 2000000 3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-2000000}"
ROUNDS="${2:-3}"
WORK="$(mktemp -d /tmp/sluice-metrics.XXXXXX)"
PORT=5481
HTTP=9481
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  [ -n "${SCRAPER:-}" ] && kill "$SCRAPER" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
python3 benches/gen_usage.py "$ROWS" "$WORK/usage.csv"
sql() { psql -X -q -h 127.0.0.1 -p $PORT -U b -d b "$@"; }

# run MODE: "copy_seconds freshness_ms" for one fresh server.
run() {
  rm -rf "$WORK/data"
  local http=off
  [ "$1" = on ] && http=127.0.0.1:$HTTP
  "$SLUICE" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" --http-listen "$http" 2>"$WORK/log" &
  SLUICE_PID=$!
  for _ in $(seq 100); do sql -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
  if [ "$1" = on ]; then
    (while true; do curl -s "http://127.0.0.1:$HTTP/metrics" >/dev/null; sleep 1; done) &
    SCRAPER=$!
  fi
  sql -c "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')" \
      -c "CREATE MATERIALIZED VIEW by_tenant AS SELECT tenant, SUM(tokens) AS tokens FROM usage GROUP BY tenant"
  local t0 t1 t2
  t0=$(date +%s.%N)
  sql -c "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
  t1=$(date +%s.%N)
  # Freshness: from the end of the COPY until the view has every row.
  until [ "$(psql -X -tA -h 127.0.0.1 -p $PORT -U b -d b -c "SELECT lag_rows FROM sluice_catalog.views")" = 0 ]; do sleep 0.01; done
  t2=$(date +%s.%N)
  [ -n "${SCRAPER:-}" ] && kill "$SCRAPER" && SCRAPER=
  kill "$SLUICE_PID"; wait "$SLUICE_PID" 2>/dev/null || true; SLUICE_PID=
  python3 -c "print(f'{$t1 - $t0:.3f} {($t2 - $t1) * 1000:.0f}')"
}

OFF=(); ON=()
for _ in $(seq "$ROUNDS"); do
  OFF+=("$(run off)")
  ON+=("$(run on)")
done
python3 - "$ROWS" "${OFF[*]}" "${ON[*]}" <<'PY'
import sys
rows = int(sys.argv[1])
def pairs(s):
    v = [float(x) for x in s.split()]
    return v[0::2], v[1::2]
off_copy, off_fresh = pairs(sys.argv[2])
on_copy, on_fresh = pairs(sys.argv[3])
best = lambda xs: min(xs)
print("| rows | endpoint off: COPY s (best) | on, scraped every second: COPY s (best) | on / off rows/s | view caught up after COPY, ms (off / on, best) |")
print("|---|---|---|---|---|")
print(f"| {rows:,} | {' '.join(f'{x:.2f}' for x in off_copy)} ({best(off_copy):.2f}) | {' '.join(f'{x:.2f}' for x in on_copy)} ({best(on_copy):.2f}) | {best(off_copy) / best(on_copy):.3f}x | {best(off_fresh):.0f} / {best(on_fresh):.0f} |")
PY
