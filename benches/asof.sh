#!/usr/bin/env bash
# Point-in-time joins, same run:
# - batch: L labels ASOF JOIN F feature updates over K users (each label
#   to its user's latest feature at or before its time), in Sluice and in
#   DuckDB (its ASOF JOIN), over the same rows; wall time and the ratio;
# - view backfill: the same join as a materialized view over the rows
#   already written, until FLUSH returns: events per CPU-second of the
#   server, and the operator's state (rows, bytes) after;
# - steady state: L/10 more labels and F/10 more features written in
#   1,000-row commits, in time order, while the view keeps up: events per
#   CPU-second, and the state after.
#
#   bash benches/asof.sh [labels] [features] [users]   (default 10000000 1000000 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
LABELS="${1:-10000000}"
FEATURES="${2:-1000000}"
USERS="${3:-100000}"
WORK="$(mktemp -d /tmp/sluice-asof.XXXXXX)"
PORT=5493
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
python3 -c 'import duckdb, psycopg' 2>/dev/null || python3 -m pip install -q duckdb psycopg

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"
cleanup() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "generating $LABELS labels and $FEATURES features over $USERS users"
# Times spread over 30 days, in time order (as a log receives them); the
# rows after the first 10/11 are the steady-state writes.
python3 - "$LABELS" "$FEATURES" "$USERS" "$WORK" <<'PY'
import sys, duckdb
labels, features, users, work = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
c = duckdb.connect()
span = 30 * 86400
for name, n, extra in (("labels", labels, "(random() < 0.3)::INT AS label"), ("features", features, "round(random() * 100, 2) AS score")):
    total = n + n // 10
    c.execute(f"""CREATE TABLE {name} AS SELECT (hash(i * 7) % {users})::BIGINT AS user_id,
        TIMESTAMP '2026-01-01' + to_seconds(i * {span} // {total}) AS t, {extra}
        FROM range({total}) r(i)""")
    c.execute(f"COPY (SELECT * FROM {name} LIMIT {n}) TO '{work}/{name}.csv' (HEADER false)")
    c.execute(f"COPY (SELECT * FROM {name} OFFSET {n}) TO '{work}/{name}_more.csv' (HEADER false)")
PY

"$SLUICE" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" --http-listen off 2>"$WORK/sluice.log" &
PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PORT -U sluice -d sluice -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
q() { psql -qtA -h 127.0.0.1 -p $PORT -U sluice -d sluice -c "$1"; }
q "CREATE TABLE labels (user_id BIGINT, labeled_at TIMESTAMP, label INT,
  WATERMARK FOR labeled_at AS labeled_at - INTERVAL '1 minute') APPEND ONLY WITH (partitions = 4, partition_key = 'user_id')"
q "CREATE TABLE features (user_id BIGINT, updated_at TIMESTAMP, score FLOAT8,
  WATERMARK FOR updated_at AS updated_at - INTERVAL '1 minute') APPEND ONLY WITH (partitions = 4, partition_key = 'user_id')"
q "\\copy features FROM '$WORK/features.csv' WITH (FORMAT csv)"
q "\\copy labels FROM '$WORK/labels.csv' WITH (FORMAT csv)"

JOIN="FROM labels l ASOF JOIN features f ON l.user_id = f.user_id AND l.labeled_at >= f.updated_at"
BATCH="SELECT count(*), round(sum(f.score)) $JOIN"

python3 - "$PORT" "$PID" "$WORK" "$BATCH" "$JOIN" "$LABELS" "$FEATURES" "$USERS" <<'PY'
import sys, time, duckdb, psycopg
port, pid, work, batch, join = sys.argv[1:6]
labels, features, users = (int(x) for x in sys.argv[6:9])
TICK = 100

def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK

s = psycopg.connect(f"host=127.0.0.1 port={port} user=sluice dbname=sluice", autocommit=True)

def best(f, n=3):
    out = []
    for _ in range(n):
        t = time.time()
        r = f()
        out.append(time.time() - t)
    return min(out), r

st, sr = best(lambda: s.execute(batch).fetchone())
d = duckdb.connect()
d.execute(f"CREATE TABLE labels AS SELECT * FROM read_csv('{work}/labels.csv', header=false, columns={{'user_id':'BIGINT','labeled_at':'TIMESTAMP','label':'INT'}})")
d.execute(f"CREATE TABLE features AS SELECT * FROM read_csv('{work}/features.csv', header=false, columns={{'user_id':'BIGINT','updated_at':'TIMESTAMP','score':'DOUBLE'}})")
dt, dr = best(lambda: d.execute(batch).fetchone())
assert tuple(sr) == tuple(dr), f"Sluice {sr}, DuckDB {dr}"

# The view over what is written: backfill.
c0, t0 = cpu(), time.time()
s.execute(f"CREATE MATERIALIZED VIEW training AS SELECT l.user_id, l.labeled_at, l.label, f.score {join}")
s.execute("FLUSH")
bt, bc = time.time() - t0, cpu() - c0
def state():
    return s.execute("SELECT state_rows, state_bytes FROM sluice_catalog.view_operators WHERE view_name = 'training' AND kind = 'asof join'").fetchone()
b_rows, b_bytes = state()
assert s.execute("SELECT count(*) FROM training").fetchone()[0] == sr[0]

# Steady state: the rest, in time order, in 1,000-row commits.
rows = []
for name in ("features", "labels"):
    for line in open(f"{work}/{name}_more.csv"):
        u, t, v = line.rstrip("\n").split(",")
        rows.append((t, name, int(u), v))
rows.sort()
c0, t0 = cpu(), time.time()
for i in range(0, len(rows), 1000):
    chunk = rows[i:i + 1000]
    for name in ("features", "labels"):
        vals = [(u, t, v) for (t, n, u, v) in chunk if n == name]
        if vals:
            with s.cursor() as cur:
                with cur.copy(f"COPY {name} FROM STDIN") as cp:
                    for v in vals:
                        cp.write_row(v)
s.execute("FLUSH")
at, ac = time.time() - t0, cpu() - c0
a_rows, a_bytes = state()
n0, n1 = labels + features, len(rows)
print(f"| labels x features (users) | Sluice batch | DuckDB batch | ratio | view backfill | backfill events per CPU-s | state after backfill | steady events per CPU-s | state after steady |")
print("|---|---|---|---|---|---|---|---|---|")
print(f"| {labels:,} x {features:,} ({users:,}) | {st:.2f} s | {dt:.2f} s | {dt / st:.2f}x | {bt:.1f} s | {n0 / bc:,.0f} | {b_rows:,} rows, {b_bytes / 2**20:.1f} MiB | {n1 / ac:,.0f} | {a_rows:,} rows, {a_bytes / 2**20:.1f} MiB |")
PY
