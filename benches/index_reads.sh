#!/usr/bin/env bash
# Point and range reads through CREATE INDEX, Sluice against PostgreSQL 15,
# same rows, same client (psycopg, prepared statements), same run:
# - a point read by a unique text column: SELECT * ... WHERE event_id = $1;
# - a range of one second of event time: count and sum of ~1,000 rows;
# each on Sluice without the index (a scan), Sluice with it, and
# PostgreSQL with the same btree index.
#
#   bash benches/index_reads.sh [rows]      (default 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-1000000}"
WORK="$(mktemp -d /tmp/sluice-bench.XXXXXX)"
SLUICE_PORT=5479
PG_PORT=5480
. benches/servers.sh
load_usage_into_both "$ROWS"
pg_sql "CREATE INDEX ON usage (event_id)"
pg_sql "CREATE INDEX ON usage (event_time)"
pg_sql "ANALYZE usage"

python3 - "$ROWS" "$SLUICE_PORT" "$PG_PORT" <<'PY'
import datetime, random, sys, time
import psycopg

rows, sluice, pg = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = random.Random(7)
ids = [f"evt-{rng.randrange(rows):09d}" for _ in range(2000)]
start = datetime.datetime(2026, 1, 1)
span = max(rows // 1000 - 2, 1)
times = [start + datetime.timedelta(seconds=rng.randrange(span)) for _ in range(200)]

def run(conn, sql, args, budget):
    """Runs `sql` with each of `args` (at most `budget` seconds' worth):
    statements per second and the rows' checksum."""
    with conn.cursor() as cur:
        cur.execute(sql, args[0], prepare=True)
        cur.fetchall()
        done, check, t0 = 0, 0, time.time()
        for a in args:
            cur.execute(sql, a, prepare=True)
            for r in cur.fetchall():
                check += hash(tuple(str(v) for v in r)) & 0xFFFF
            done += 1
            if time.time() - t0 > budget:
                break
        return done / (time.time() - t0), done, check

point = "SELECT event_id, tenant, tokens FROM usage WHERE event_id = %s"
span_sql = "SELECT count(*), sum(tokens) FROM usage WHERE event_time >= %s AND event_time < %s"
point_args = [(i,) for i in ids]
span_args = [(t, t + datetime.timedelta(seconds=1)) for t in times]
s = psycopg.connect(f"host=127.0.0.1 port={sluice} user=sluice dbname=sluice", autocommit=True)
p = psycopg.connect(f"host=127.0.0.1 port={pg} user=postgres dbname=postgres", autocommit=True)
results = {}
results["scan"] = (run(s, point, point_args, 20), run(s, span_sql, span_args, 20))
t0 = time.time()
s.execute("CREATE INDEX ON usage (event_id)")
s.execute("CREATE INDEX ON usage (event_time)")
built = time.time() - t0
results["index"] = (run(s, point, point_args, 20), run(s, span_sql, span_args, 20))
results["pg"] = (run(p, point, point_args, 20), run(p, span_sql, span_args, 20))
# The same statements answer alike (over the statements both ran).
n = min(results["index"][0][1], results["pg"][0][1])
assert run(s, point, point_args[:n], 1e9)[2] == run(p, point, point_args[:n], 1e9)[2]
n = min(results["index"][1][1], results["pg"][1][1])
assert run(s, span_sql, span_args[:n], 1e9)[2] == run(p, span_sql, span_args[:n], 1e9)[2]
print(f"Sluice built both indexes over {rows:,} rows in {built:.2f} s")
print("| read | rows | Sluice, no index | Sluice, index | PostgreSQL 15, index | index / PostgreSQL |")
print("|---|---|---|---|---|---|")
for k, name in ((0, "point: event_id = $1"), (1, "range: 1 s of event_time (~1,000 rows)")):
    a, b, c = results["scan"][k][0], results["index"][k][0], results["pg"][k][0]
    print(f"| {name} | {rows:,} | {a:,.1f}/s | {b:,.0f}/s | {c:,.0f}/s | {b / c:.2f}x |")
PY
