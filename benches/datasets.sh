#!/usr/bin/env bash
# Reads at a cut and dataset exports, same run:
# - a view read AS OF CUT a cut taken after `rows` rows (and `rows / 10`
#   more written since), against ALTER MATERIALIZED VIEW ... REBUILD of the
#   same view over the whole log: both compute the view from the log;
# - COPY DATASET of a dataset of those `rows` rows (computed at its cut,
#   put in one order, hashed, written as Parquet), in rows per second,
#   against DuckDB writing the same rows to Parquet (COPY ... TO, with and
#   without ORDER BY of every column, the order a dataset file has).
#
# With QUERY_MEMORY set (bytes), the server runs with `--query-memory`
# and DuckDB with the same `memory_limit`; the server's peak RSS during
# CREATE DATASET and during COPY DATASET is printed (its peak is reset
# before each, through /proc/PID/clear_refs).
#
#   bash benches/datasets.sh [rows]      (default 10000000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-10000000}"
WORK="$(mktemp -d /tmp/sluice-bench.XXXXXX)"
SLUICE_PORT=5491
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "generating $ROWS + $((ROWS / 10)) rows"
python3 benches/gen_usage.py "$ROWS" "$WORK/usage.csv"
python3 benches/gen_usage.py "$((ROWS / 10))" "$WORK/more.csv"
MEMORY_FLAGS=()
[ -n "${QUERY_MEMORY:-}" ] && MEMORY_FLAGS=(--query-memory "$QUERY_MEMORY")
"$SLUICE" serve --listen "127.0.0.1:$SLUICE_PORT" --data-dir "$WORK/sluice" --http-listen off "${MEMORY_FLAGS[@]}" 2>"$WORK/sluice.log" &
SLUICE_PID=$!
sluice_sql() { psql -q -h 127.0.0.1 -p "$SLUICE_PORT" -U sluice -d sluice -c "$1"; }
for _ in $(seq 100); do sluice_sql 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
sluice_sql "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP,
  WATERMARK FOR event_time AS event_time - INTERVAL '10 seconds') APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"
sluice_sql "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"

python3 - "$ROWS" "$SLUICE_PORT" "$SLUICE_PID" "$WORK" <<'PY'
import os, sys, time, duckdb, psycopg

rows, port, pid, work = sys.argv[1:5]
rows = int(rows)
TICK = 100

def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

def reset_peak():
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")

def peak_mb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0

s = psycopg.connect(f"host=127.0.0.1 port={port} user=sluice dbname=sluice", autocommit=True)
s.execute("CREATE MATERIALIZED VIEW per_minute AS SELECT tenant, window_start, count(*) AS n, sum(tokens) AS t "
          "FROM TUMBLE(usage, event_time, INTERVAL '1 minute') GROUP BY tenant, window_start")
s.execute("FLUSH")
s.execute("CREATE CUT bench")
with s.cursor() as cur:
    with cur.copy("COPY usage FROM STDIN WITH (FORMAT csv)") as copy:
        with open(f"{work}/more.csv", "rb") as f:
            while chunk := f.read(1 << 20):
                copy.write(chunk)
s.execute("FLUSH")

print(f"{rows:,} rows at the cut, {rows // 10:,} after it")
print("| what | seconds | Sluice CPU-seconds | rows/s |")
print("|---|---|---|---|")
c0, t0 = cpu(), time.time()
n = len(s.execute("SELECT * FROM per_minute AS OF CUT bench").fetchall())
at_cut = time.time() - t0
print(f"| view AS OF CUT ({n:,} groups) | {at_cut:.1f} | {cpu() - c0:.1f} | {rows / at_cut:,.0f} |")
c0, t0 = cpu(), time.time()
s.execute("ALTER MATERIALIZED VIEW per_minute REBUILD")
rebuild = time.time() - t0
print(f"| REBUILD of the view (whole log) | {rebuild:.1f} | {cpu() - c0:.1f} | {rows * 1.1 / rebuild:,.0f} |")

reset_peak()
c0, t0 = cpu(), time.time()
s.execute("CREATE DATASET ds AS SELECT event_id, tenant, tokens, event_time FROM usage AS OF CUT bench")
create = time.time() - t0
print(f"| CREATE DATASET (computed, ordered, hashed; peak RSS {peak_mb():,.0f} MB) | {create:.1f} | {cpu() - c0:.1f} | {rows / create:,.0f} |")
reset_peak()
c0, t0 = cpu(), time.time()
s.execute(f"COPY DATASET ds TO '{work}/ds.parquet'")
export = time.time() - t0
size = os.path.getsize(f"{work}/ds.parquet")
print(f"| COPY DATASET to Parquet ({size / 1e6:,.0f} MB; peak RSS {peak_mb():,.0f} MB) | {export:.1f} | {cpu() - c0:.1f} | {rows / export:,.0f} |")

d = duckdb.connect()
d.execute("SET threads = 2")
if os.environ.get("QUERY_MEMORY"):
    d.execute(f"SET memory_limit = '{int(os.environ['QUERY_MEMORY']) // (1 << 20)}MB'")
d.execute(f"CREATE TABLE usage AS SELECT * FROM read_csv('{work}/usage.csv', header=false, columns={{'event_id':'VARCHAR','tenant':'VARCHAR','tokens':'BIGINT','event_time':'TIMESTAMP'}})")
t0 = time.time()
d.execute(f"COPY usage TO '{work}/duck.parquet' (FORMAT parquet)")
plain = time.time() - t0
print(f"| DuckDB COPY TO Parquet | {plain:.1f} | | {rows / plain:,.0f} |")
t0 = time.time()
d.execute(f"COPY (SELECT * FROM usage ORDER BY ALL) TO '{work}/duck_sorted.parquet' (FORMAT parquet)")
ordered = time.time() - t0
print(f"| DuckDB COPY TO Parquet, ORDER BY ALL | {ordered:.1f} | | {rows / ordered:,.0f} |")
print(f"COPY DATASET / DuckDB ordered: {ordered / export:.2f}x; / DuckDB plain: {plain / export:.2f}x")
PY
