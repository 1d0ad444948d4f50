#!/usr/bin/env bash
# Ingest while a view holds many groups: G events with G distinct user ids
# (as benches/max_groups.sh loads them), the COUNT/SUM/MIN/MAX view over
# them backfilled, then pgbench -M prepared, 8 clients, single-row INSERTs
# into the view's table for S seconds, each of a user id drawn from 1.5 G
# (so about a third are new groups). Reports the INSERT rate, the server's
# CPU time during the run, and the view's checkpoints during it (how many,
# and their mean and longest duration).
#
#   bash benches/large_view_ingest.sh [groups] [seconds]   (default 2000000 15)
#   SLUICE_BIN=/path/to/sluice   measures another build of the server
set -euo pipefail
cd "$(dirname "$0")/.."
G="${1:-2000000}"
SECS="${2:-15}"
PORT=5482
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
  SLUICE_BIN="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
fi
WORK="$(mktemp -d /tmp/sluice-largeview.XXXXXX)"
cleanup() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
q() { psql -X -qtA -h 127.0.0.1 -p $PORT -c "$1"; }
python3 - "$G" "$WORK/events.csv" <<'PY'
import sys, duckdb
g, path = int(sys.argv[1]), sys.argv[2]
duckdb.connect().execute(f"""
  COPY (SELECT lpad(i::VARCHAR, 8, '0') AS user_id, (i * 31) % 1000 AS tokens
        FROM range({g}) t(i)) TO '{path}' (HEADER false)""")
PY
"$SLUICE_BIN" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" --http-listen off 2>"$WORK/sluice.log" &
PID=$!
for _ in $(seq 300); do psql -h 127.0.0.1 -p $PORT -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
q "CREATE TABLE ev (user_id TEXT, tokens BIGINT) APPEND ONLY WITH (partitions = 4)"
q "\\copy ev FROM '$WORK/events.csv' WITH (FORMAT csv)"
q "CREATE MATERIALIZED VIEW per_user AS SELECT user_id, COUNT(*) AS n, SUM(tokens) AS tokens, MIN(tokens) AS lo, MAX(tokens) AS hi FROM ev GROUP BY user_id" 2>/dev/null
q "FLUSH"
E0=$(q "SELECT coalesce(max(epoch), 0) FROM sluice_catalog.checkpoints WHERE view_name = 'per_user'")
cat >"$WORK/insert.sql" <<SQL
\\set u random(0, $((G * 3 / 2)))
INSERT INTO ev (user_id, tokens) VALUES (:u, 1);
SQL
read -r U0 S0 < <(awk '{print $14, $15}' "/proc/$PID/stat")
TPS=$(pgbench -n -M prepared -c 8 -j 2 -T "$SECS" -h 127.0.0.1 -p $PORT -f "$WORK/insert.sql" postgres 2>&1 \
  | awk '/^tps/ {print $3}')
read -r U1 S1 < <(awk '{print $14, $15}' "/proc/$PID/stat")
CK=$(q "SELECT count(*) || ' ' || coalesce(round(avg(duration_ms)), 0) || ' ' || coalesce(max(duration_ms), 0) FROM sluice_catalog.checkpoints WHERE view_name = 'per_user' AND epoch > $E0")
q "FLUSH"
TICKS=$(getconf CLK_TCK)
read -r CN CAVG CMAX <<<"$CK"
echo "| groups | INSERTs/s | server user CPU s | server system CPU s | checkpoints during the run | mean / longest checkpoint ms |"
echo "|---|---|---|---|---|---|"
echo "| $G | ${TPS%.*} | $(echo "($U1 - $U0) / $TICKS" | bc -l | xargs printf '%.1f') | $(echo "($S1 - $S0) / $TICKS" | bc -l | xargs printf '%.1f') | $CN | $CAVG / $CMAX |"
