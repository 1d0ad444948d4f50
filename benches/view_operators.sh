#!/usr/bin/env bash
# Newer view operators (over-window, dynamic filter, collecting aggregates,
# ordered views, Top-N with OFFSET), each over the same usage rows (50
# tenants), same run: Sluice's backfill (CREATE MATERIALIZED VIEW to FLUSH) and steady
# updates (single-row INSERTs after it), in events
# per CPU-second of the Sluice process; DuckDB's batch answer to the query
# (events per second of one run over all rows), and PostgreSQL's REFRESH
# MATERIALIZED VIEW of the same query (what a PostgreSQL user runs to see a
# change: its refreshes per second are the updates per second it can show).
# The updates are single-row INSERTs (a commit each), then one FLUSH; the
# last row is an aggregate over a table that takes UPDATE and DELETE, whose
# updates are single-row UPDATEs and DELETEs.
#
#   bash benches/view_operators.sh [rows] [updates]   (default 200000 200)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-200000}"
UPDATES="${2:-200}"
WORK="$(mktemp -d /tmp/sluice-bench.XXXXXX)"
SLUICE_PORT=5481
PG_PORT=5482
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb
. benches/servers.sh
load_usage_into_both "$ROWS"

python3 - "$ROWS" "$UPDATES" "$SLUICE_PORT" "$PG_PORT" "$SLUICE_PID" "$WORK/usage.csv" <<'PY'
import sys, time, duckdb, psycopg

rows, updates, sluice, pg, pid, csv = sys.argv[1:7]
rows, updates = int(rows), int(updates)
VIEWS = {
    "over-window (rank per tenant)":
        "SELECT event_id, tenant, tokens, rank() OVER (PARTITION BY tenant ORDER BY tokens DESC, event_id) AS r FROM usage",
    "over-window in time order (row_number, lag per tenant)":
        "SELECT event_id, tenant, event_time, row_number() OVER (PARTITION BY tenant ORDER BY event_time, event_id) AS n, lag(tokens) OVER (PARTITION BY tenant ORDER BY event_time, event_id) AS prev FROM usage",
    "dynamic filter (above the average)":
        "SELECT event_id, tokens FROM usage WHERE tokens > (SELECT avg(tokens) FROM usage)",
    "collecting aggregates (string_agg, stddev, bool_or)":
        "SELECT tenant, string_agg(event_id, ',' ORDER BY event_id) AS ids, stddev(tokens::float8) AS sd, bool_or(tokens > 900) AS big FROM usage GROUP BY tenant",
    "ORDER BY without LIMIT":
        "SELECT tenant, event_id, tokens FROM usage WHERE tokens > 990 ORDER BY tokens DESC, event_id",
    "Top-N with OFFSET":
        "SELECT event_id, tokens FROM usage ORDER BY tokens DESC, event_id LIMIT 10 OFFSET 10",
}
TICK = 100  # clock ticks per second in /proc/<pid>/stat

def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

s = psycopg.connect(f"host=127.0.0.1 port={sluice} user=sluice dbname=sluice", autocommit=True)
p = psycopg.connect(f"host=127.0.0.1 port={pg} user=postgres dbname=postgres", autocommit=True)
d = duckdb.connect()
d.execute(f"CREATE TABLE usage AS SELECT * FROM read_csv('{csv}', header=false, columns={{'event_id':'VARCHAR','tenant':'VARCHAR','tokens':'BIGINT','event_time':'TIMESTAMP'}})")

print(f"{rows:,} rows, {updates} single-row updates")
print("| operator | Sluice backfill events/CPU-s | Sluice updates events/CPU-s | DuckDB batch events/s | PostgreSQL REFRESH events/s |")
print("|---|---|---|---|---|")
next_id = 0
for i, (name, query) in enumerate(VIEWS.items()):
    c0, t0 = cpu(), time.time()
    s.execute(f"CREATE MATERIALIZED VIEW bench_{i} AS {query}")
    s.execute("FLUSH")
    backfill = rows / max(cpu() - c0, 0.01)
    c0 = cpu()
    for _ in range(updates):
        next_id += 1
        # Later than every loaded row: new events arrive in time order.
        s.execute("INSERT INTO usage VALUES (%s, %s, %s, %s)",
                  (f"upd-{next_id:06d}", f"tenant-{next_id % 50:02d}", (next_id * 37) % 1000,
                   f"2027-01-01 00:{next_id // 60 % 60:02d}:{next_id % 60:02d}"))
    s.execute("FLUSH")
    steady = updates / max(cpu() - c0, 0.01)
    s.execute(f"DROP MATERIALIZED VIEW bench_{i}")
    t = time.time()
    d.execute(query).fetchall()
    duck = rows / (time.time() - t)
    p.execute(f"CREATE MATERIALIZED VIEW bench_{i} AS {query}")
    t = time.time()
    p.execute(f"REFRESH MATERIALIZED VIEW bench_{i}")
    refresh = time.time() - t
    p.execute(f"DROP MATERIALIZED VIEW bench_{i}")
    print(f"| {name} | {backfill:,.0f} | {steady:,.0f} | {duck:,.0f} | {rows / refresh:,.0f} ({1 / refresh:,.1f} refreshes/s) |", flush=True)

# A table without a primary key that takes UPDATE and DELETE (Sluice's
# default; `usage` above is APPEND ONLY): the same rows, an aggregate over
# it, and single-row UPDATEs and DELETEs as the steady changes (each finds
# its row by event_id with a scan, in Sluice and PostgreSQL alike).
s.execute("CREATE TABLE usage_rows (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) WITH (partitions = 4, partition_key = 'tenant')")
c0 = cpu()
s.execute("INSERT INTO usage_rows SELECT * FROM usage")
copied = rows / max(cpu() - c0, 0.01)
query = "SELECT tenant, count(*) AS n, sum(tokens) AS total, max(tokens) AS biggest FROM usage_rows GROUP BY tenant"
c0 = cpu()
s.execute(f"CREATE MATERIALIZED VIEW bench_rows AS {query}")
s.execute("FLUSH")
backfill = rows / max(cpu() - c0, 0.01)
ids = [r[0] for r in s.execute(f"SELECT event_id FROM usage_rows ORDER BY event_id LIMIT {updates}").fetchall()]
c0, t0 = cpu(), time.time()
for n, event_id in enumerate(ids):
    if n % 2:
        s.execute("DELETE FROM usage_rows WHERE event_id = %s", (event_id,))
    else:
        s.execute("UPDATE usage_rows SET tokens = tokens + 1 WHERE event_id = %s", (event_id,))
s.execute("FLUSH")
steady = len(ids) / max(cpu() - c0, 0.01)
statements = len(ids) / (time.time() - t0)
p.execute("CREATE TABLE usage_rows AS SELECT * FROM usage")
p.execute(f"CREATE MATERIALIZED VIEW bench_rows AS {query}")
t = time.time()
for n, event_id in enumerate(ids):
    if n % 2:
        p.execute("DELETE FROM usage_rows WHERE event_id = %s", (event_id,))
    else:
        p.execute("UPDATE usage_rows SET tokens = tokens + 1 WHERE event_id = %s", (event_id,))
pg_statements = len(ids) / (time.time() - t)
t = time.time()
p.execute("REFRESH MATERIALIZED VIEW bench_rows")
refresh = time.time() - t
t = time.time()
d.execute(query.replace("usage_rows", "usage")).fetchall()
duck = rows / (time.time() - t)
print(f"| aggregate over a table that takes UPDATE and DELETE ({len(ids)} single-row UPDATEs/DELETEs: Sluice {statements:,.0f} statements/s, PostgreSQL {pg_statements:,.0f}/s; INSERT ... SELECT into it {copied:,.0f} rows/CPU-s) | {backfill:,.0f} | {steady:,.0f} | {duck:,.0f} | {rows / refresh:,.0f} ({1 / refresh:,.1f} refreshes/s) |", flush=True)
PY
