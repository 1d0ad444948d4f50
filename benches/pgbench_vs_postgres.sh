#!/usr/bin/env bash
# Small prepared statements from many clients, as drivers send them:
# pgbench -M prepared, 8 clients, against Sluice and PostgreSQL 15 in the
# same run, one after the other.
#
#   1. single-row INSERT (durable on both sides: Sluice fsyncs each commit,
#      PostgreSQL runs with fsync and synchronous_commit on);
#   2. point read by key of a 50-row aggregate: a materialized view in
#      Sluice, a table with a primary key in PostgreSQL;
#   3. a transaction block of two INSERTs into one table, and
#   4. one of an INSERT into each of two tables (committed together);
#   5. point read by primary key of a 100,000-row table (a keyed table in
#      Sluice, a table with a primary key in PostgreSQL).
#
#   bash benches/pgbench_vs_postgres.sh [seconds per run]   (default 15)
#   SLUICE_BIN=/path/to/sluice runs another build of the server
#   MODE=simple sends each statement as text (parsed and planned each time)
#   THREADS=n runs pgbench with n threads (-j, default 2)
#   HEAVY=n runs n copies of an analytic cross join (a mistyped join that
#   runs for minutes) beside every pgbench run, on both servers, and then
#   measures how long a cancel of one takes to answer (see
#   benches/README.md, "Beside heavy queries")
#
# Besides tps and latency, each run reports the CPU the machine spent per
# transaction outside pgbench (the server and the kernel's TCP and disk work,
# from /proc/stat, minus pgbench's own user and system time): on this
# 2-core machine the client takes a share of the CPU that depends on the
# server it talks to, so this is the fairer comparison of what each
# server costs.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-15}"
CLIENTS="${CLIENTS:-8}"
MODE="${MODE:-prepared}"
THREADS="${THREADS:-2}"
HEAVY="${HEAVY:-0}"
HEAVY_SQL="SELECT count(*) FROM generate_series(1, 150000) a(x), generate_series(1, 150000) b(x) WHERE a.x + b.x = 1"
WORK="$(mktemp -d /tmp/sluice-pgbench.XXXXXX)"
SLUICE_PORT=5477
PG_PORT=5478
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

if [ ! -x /usr/lib/postgresql/15/bin/pg_ctl ]; then
  apt-get update -qq && apt-get install -y -qq postgresql-15 postgresql-contrib >/dev/null
fi
PGBIN=/usr/lib/postgresql/15/bin
PGBENCH="$(command -v pgbench || echo $PGBIN/pgbench)"

# SLUICE_BIN=/path/to/sluice runs another build of the server.
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
fi
SLUICE="${SLUICE_BIN:-$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice}"

cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  [ -d "$WORK/pg" ] && su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 777 "$WORK"

cat >"$WORK/insert.sql" <<'SQL'
\set id random(1, 1000000000)
\set t random(1, 50)
\set k random(1, 1000)
INSERT INTO ev (id, tenant, tokens) VALUES (:id, :t, :k);
SQL
cat >"$WORK/read.sql" <<'SQL'
\set t random(1, 50)
SELECT tenant, n, tokens FROM totals WHERE tenant = :t;
SQL
cat >"$WORK/read_keyed.sql" <<'SQL'
\set id random(1, 100000)
SELECT id, name, score FROM users WHERE id = :id;
SQL
cat >"$WORK/tx_one.sql" <<'SQL'
\set id random(1, 1000000000)
BEGIN;
INSERT INTO txev (id, tenant, tokens) VALUES (:id, 1, 1);
INSERT INTO txev (id, tenant, tokens) VALUES (:id, 2, 2);
COMMIT;
SQL
cat >"$WORK/tx_two.sql" <<'SQL'
\set id random(1, 1000000000)
BEGIN;
INSERT INTO txev (id, tenant, tokens) VALUES (:id, 1, 1);
INSERT INTO audit (id, what) VALUES (:id, 'tx');
COMMIT;
SQL

# start_heavy PORT USER: HEAVY copies of the heavy query, each from its own
# psql; stop_heavy cancels them (psql sends a CancelRequest on SIGINT).
HEAVY_PIDS=()
start_heavy() {
  HEAVY_PIDS=()
  for _ in $(seq "$HEAVY"); do
    psql -q -h 127.0.0.1 -p "$1" -U "$2" -d "$2" -c "$HEAVY_SQL" >/dev/null 2>&1 &
    HEAVY_PIDS+=($!)
  done
  if [ "$HEAVY" -gt 0 ]; then sleep 1; fi
}
stop_heavy() {
  for p in "${HEAVY_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${HEAVY_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  HEAVY_PIDS=()
}

# cancel_latency PORT USER: milliseconds from psycopg's cancel() of a running
# heavy query to its 57014 error, beside HEAVY - 1 others; the median of 5.
cancel_latency() {
  HEAVY=$((HEAVY - 1)) start_heavy "$1" "$2"
  python3 - "$1" "$2" "$HEAVY_SQL" <<'PY'
import statistics, sys, threading, time
import psycopg
port, user, sql = sys.argv[1:4]
took = []
for _ in range(5):
    c = psycopg.connect(f"host=127.0.0.1 port={port} user={user} dbname={user}", autocommit=True)
    ended = {}
    def run():
        try:
            c.execute(sql)
        except psycopg.errors.QueryCanceled:
            ended["at"] = time.monotonic()
    t = threading.Thread(target=run); t.start(); time.sleep(1)
    asked = time.monotonic(); c.cancel(); t.join(60)
    took.append((ended["at"] - asked) * 1000)
    c.close()
print(f"{statistics.median(took):.1f}")
PY
  stop_heavy
}

# Busy CPU time of the whole machine, in clock ticks.
machine_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }

# run NAME PORT USER SCRIPT: tps, latency percentiles and CPU microseconds
# per transaction outside pgbench, of one pgbench run.
run() {
  local name=$1 port=$2 user=$3 script=$4 busy_before busy_after
  rm -f "$WORK"/log.*
  start_heavy "$port" "$user"
  busy_before=$(machine_busy)
  (cd "$WORK" && /usr/bin/time -f "%U %S" -o "$WORK/$name.time" \
    "$PGBENCH" -n -M "$MODE" -c "$CLIENTS" -j "$THREADS" -T "$SECS" -l --log-prefix=log \
    -h 127.0.0.1 -p "$port" -U "$user" -f "$script" "$user" >"$WORK/$name.out" 2>&1) \
    || { cat "$WORK/$name.out"; exit 1; }
  busy_after=$(machine_busy)
  stop_heavy
  python3 - "$name" "$WORK/$name.out" "$WORK" "$WORK/$name.time" \
    "$((busy_after - busy_before))" "$(getconf CLK_TCK)" <<'PY'
import glob, re, sys
name, out, work, cpu_file = sys.argv[1:5]
busy_s = int(sys.argv[5]) / int(sys.argv[6])
text = open(out).read()
tps = float(re.search(r"tps = ([0-9.]+)", text).group(1))
transactions = sum(1 for f in glob.glob(work + "/log.*") for _ in open(f))
lat = sorted(int(l.split()[2]) for f in glob.glob(work + "/log.*") for l in open(f))
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
client_s = sum(float(x) for x in open(cpu_file).read().split()[-2:])
server_us = (busy_s - client_s) * 1e6 / transactions
print(f"{name} {tps:.0f} {p(0.5):.2f} {p(0.99):.2f} {server_us:.1f}")
PY
}

# --- Sluice ---
"$SLUICE" serve --listen 127.0.0.1:$SLUICE_PORT --data-dir "$WORK/sluice" 2>"$WORK/sluice.log" &
SLUICE_PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "CREATE TABLE ev (id BIGINT, tenant BIGINT, tokens BIGINT) WITH (partitions = 4)"
S_INSERT=$(run sluice_insert $SLUICE_PORT b "$WORK/insert.sql")
S_ROWS=$(psql -tA -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "SELECT COUNT(*) FROM ev")
psql -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "CREATE MATERIALIZED VIEW totals AS SELECT tenant, COUNT(*) AS n, SUM(tokens) AS tokens FROM ev GROUP BY tenant" -c "FLUSH"
S_READ=$(run sluice_read $SLUICE_PORT b "$WORK/read.sql")
# The transactions write to tables no view reads, as on the PostgreSQL side.
psql -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "CREATE TABLE txev (id BIGINT, tenant BIGINT, tokens BIGINT) WITH (partitions = 4)" \
  -c "CREATE TABLE audit (id BIGINT, what TEXT) WITH (partitions = 4)"
S_TX1=$(run sluice_tx_one $SLUICE_PORT b "$WORK/tx_one.sql")
S_TX2=$(run sluice_tx_two $SLUICE_PORT b "$WORK/tx_two.sql")
psql -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b -c "CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT, score BIGINT) WITH (partitions = 4)" \
  -c "INSERT INTO users SELECT value, 'user' || CAST(value AS TEXT), value % 100 FROM generate_series(1, 100000) AS s(value)"
S_KEYED=$(run sluice_read_keyed $SLUICE_PORT b "$WORK/read_keyed.sql")
S_CANCEL=-; if [ "$HEAVY" -gt 0 ]; then S_CANCEL=$(cancel_latency $SLUICE_PORT b); fi
kill $SLUICE_PID; wait $SLUICE_PID 2>/dev/null || true; SLUICE_PID=

# --- PostgreSQL 15, durable defaults ---
mkdir -p "$WORK/pg"; chown postgres "$WORK/pg"
su postgres -c "$PGBIN/initdb -D $WORK/pg -A trust -U postgres" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on' -l $WORK/pg.log start" >/dev/null
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PG_PORT -U postgres -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p $PG_PORT -U postgres -c "CREATE TABLE ev (id BIGINT, tenant BIGINT, tokens BIGINT)"
P_INSERT=$(run postgres_insert $PG_PORT postgres "$WORK/insert.sql")
psql -q -h 127.0.0.1 -p $PG_PORT -U postgres -c "CREATE TABLE totals AS SELECT tenant, COUNT(*) AS n, SUM(tokens) AS tokens FROM ev GROUP BY tenant" \
  -c "ALTER TABLE totals ADD PRIMARY KEY (tenant)" -c "ANALYZE totals"
P_READ=$(run postgres_read $PG_PORT postgres "$WORK/read.sql")
psql -q -h 127.0.0.1 -p $PG_PORT -U postgres -c "CREATE TABLE txev (id BIGINT, tenant BIGINT, tokens BIGINT)" \
  -c "CREATE TABLE audit (id BIGINT, what TEXT)"
P_TX1=$(run postgres_tx_one $PG_PORT postgres "$WORK/tx_one.sql")
P_TX2=$(run postgres_tx_two $PG_PORT postgres "$WORK/tx_two.sql")
psql -q -h 127.0.0.1 -p $PG_PORT -U postgres -c "CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT, score BIGINT)" \
  -c "INSERT INTO users SELECT g, 'user' || g, g % 100 FROM generate_series(1, 100000) AS g" -c "ANALYZE users"
P_KEYED=$(run postgres_read_keyed $PG_PORT postgres "$WORK/read_keyed.sql")
P_CANCEL=-; if [ "$HEAVY" -gt 0 ]; then P_CANCEL=$(cancel_latency $PG_PORT postgres); fi

echo "heavy queries beside each run: $HEAVY; cancel of a heavy query answered after (median ms): Sluice $S_CANCEL, PostgreSQL $P_CANCEL"
python3 - "$CLIENTS" "$THREADS" "$MODE" "$S_ROWS" "$S_INSERT" "$P_INSERT" "$S_READ" "$P_READ" "$S_TX1" "$P_TX1" "$S_TX2" "$P_TX2" "$S_KEYED" "$P_KEYED" <<'PY'
import sys
clients, threads, mode, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = [a.split() for a in sys.argv[5:]]
print(f"clients: {clients}; threads: {threads}; protocol: {mode}; Sluice stored {rows:,} inserted rows")
print("| statement | Sluice tps | p50 / p99 ms | PostgreSQL 15 tps | p50 / p99 ms | ratio | CPU us per transaction outside pgbench, Sluice / PostgreSQL |")
print("|---|---|---|---|---|---|---|")
for what, s, p in [
    ("single-row INSERT", runs[0], runs[1]),
    ("point read by key", runs[2], runs[3]),
    ("BEGIN; 2 INSERTs into one table; COMMIT", runs[4], runs[5]),
    ("BEGIN; INSERT into each of two tables; COMMIT", runs[6], runs[7]),
    ("point read of a 100,000-row table by primary key", runs[8], runs[9]),
]:
    print(f"| {what} | {float(s[1]):,.0f} | {s[2]} / {s[3]} | {float(p[1]):,.0f} | {p[2]} / {p[3]} | {float(s[1]) / float(p[1]):.2f}x | {s[4]} / {p[4]} |")
PY
