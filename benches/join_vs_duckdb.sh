#!/usr/bin/env bash
# A view with a join: N usage events (4 partitions) joined to a keyed table
# of T tenants (plan, price) and summed per tenant and hour, backfilled by
# Sluice; DuckDB runs the same query as one batch over the same rows in the
# same run. Then the cost of a price change: one tenant row updated, in
# milliseconds until the view shows it.
#
#   bash benches/join_vs_duckdb.sh [events] [tenants]   (default 10000000 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-10000000}"
TENANTS="${2:-10000}"
WORK="$(mktemp -d /tmp/sluice-join.XXXXXX)"
PORT=5478
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
python3 -c 'import duckdb, psycopg' 2>/dev/null || python3 -m pip install -q duckdb psycopg

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
cleanup() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "generating $EVENTS events over $TENANTS tenants"
python3 benches/gen_usage.py "$EVENTS" "$WORK/usage.csv" "$TENANTS"
python3 - "$TENANTS" "$WORK/tenants.csv" <<'PY'
import sys
n = int(sys.argv[1])
with open(sys.argv[2], "w") as f:
    for i in range(n):
        f.write(f"tenant-{i:02d},{['free', 'pro', 'enterprise'][i % 3]},{50 + i % 200}\n")
PY

"$SLUICE" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" 2>"$WORK/sluice.log" &
PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PORT -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
q() { psql -qtA -h 127.0.0.1 -p $PORT -c "$1"; }
q "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"
q "CREATE TABLE tenants (tenant TEXT PRIMARY KEY, plan TEXT, price_per_1k_cents BIGINT)"
q "\\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
q "\\copy tenants FROM '$WORK/tenants.csv' WITH (FORMAT csv)"

QUERY="SELECT u.tenant, t.plan, date_trunc('hour', u.event_time) AS hour, SUM(u.tokens) AS tokens, SUM(u.tokens * t.price_per_1k_cents) / 1000 AS cost_cents FROM usage u JOIN tenants t ON u.tenant = t.tenant GROUP BY u.tenant, t.plan, date_trunc('hour', u.event_time)"

cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
c0=$(cpu); t0=$(date +%s.%N)
q "CREATE MATERIALIZED VIEW bill AS $QUERY"
q "FLUSH"
t1=$(date +%s.%N); c1=$(cpu)
rss=$(ps -o rss= -p $PID)
rows=$(q "SELECT count(*) FROM bill")

d=$(python3 - "$WORK" "$QUERY" <<'PY'
import sys, time, duckdb
w = sys.argv[1]
con = duckdb.connect()
con.execute(f"CREATE TABLE usage AS SELECT * FROM read_csv('{w}/usage.csv', header=false, columns={{'event_id':'VARCHAR','tenant':'VARCHAR','tokens':'BIGINT','event_time':'TIMESTAMP'}})")
con.execute(f"CREATE TABLE tenants AS SELECT * FROM read_csv('{w}/tenants.csv', header=false, columns={{'tenant':'VARCHAR','plan':'VARCHAR','price_per_1k_cents':'BIGINT'}})")
t = time.time()
n = len(con.execute(sys.argv[2]).fetchall())
print(time.time() - t, n)
PY
)

# A price change: milliseconds from the UPDATE being acknowledged until the
# view shows the tenant's new cost (median of 5).
lat=$(python3 - "$PORT" <<'PY'
import sys, time, statistics, psycopg
c = psycopg.connect(f"host=127.0.0.1 port={sys.argv[1]} user=bench dbname=sluice", autocommit=True)
out = []
for i in range(5):
    tenant = f"tenant-{42 + i:02d}"
    before = c.execute("SELECT sum(cost_cents) FROM bill WHERE tenant = %s", (tenant,)).fetchone()[0]
    t = time.time()
    c.execute("UPDATE tenants SET price_per_1k_cents = price_per_1k_cents + 100 WHERE tenant = %s", (tenant,))
    while c.execute("SELECT sum(cost_cents) FROM bill WHERE tenant = %s", (tenant,)).fetchone()[0] == before:
        time.sleep(0.0005)
    out.append((time.time() - t) * 1000)
print(f"{statistics.median(out):.1f}")
PY
)

python3 - "$EVENTS" "$TENANTS" "$t0" "$t1" "$c0" "$c1" "$(getconf CLK_TCK)" "$d" "$rss" "$rows" "$lat" <<'PY'
import sys
n, tenants = int(sys.argv[1]), int(sys.argv[2])
t0, t1 = float(sys.argv[3]), float(sys.argv[4])
cpu = (float(sys.argv[6]) - float(sys.argv[5])) / float(sys.argv[7])
d, drows = sys.argv[8].split()
d = float(d)
rss, rows, lat = int(sys.argv[9]), int(sys.argv[10]), sys.argv[11]
assert rows == int(drows), f"view has {rows} rows, DuckDB {drows}"
print("| events | tenants | Sluice backfill to FLUSH | Sluice events per CPU-second | DuckDB batch | ratio (wall) | price change visible | RSS |")
print("|---|---|---|---|---|---|---|---|")
print(f"| {n:,} | {tenants:,} | {t1 - t0:.2f} s ({n / (t1 - t0):,.0f} events/s) | {n / cpu:,.0f} ({cpu:.2f} CPU-s) | {d:.2f} s ({n / d:,.0f} events/s) | {d / (t1 - t0):.2f}x | {lat} ms | {rss / 1024:.0f} MiB |")
PY
