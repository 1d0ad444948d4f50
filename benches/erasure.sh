#!/usr/bin/env bash
# Erasure: one user's rows (0.1% of ROWS, by 1,000 users) erased from an
# append-only table with five materialized views (an aggregate, a join, a
# Top-N, a window, a view over a view), until the DELETE returns with the
# erasure complete: wall time, rows removed, objects and bytes rewritten.
# Against PostgreSQL 15 in the same run: DELETE of the same rows then
# VACUUM FULL of the table, and the same plus REFRESH of the five views as
# PostgreSQL materialized views.
#
#   bash benches/erasure.sh [rows]      (default 10000000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-10000000}"
WORK="$(mktemp -d /tmp/sluice-erasure.XXXXXX)"
SLUICE_PORT=5497
PG_PORT=5498
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort | tail -1)
cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"

cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  [ -d "$WORK/pg" ] && su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
now() { date +%s.%N; }

# Requests of 1,000 users over 30 days, in time order.
python3 - "$ROWS" "$WORK" <<'PY'
import sys, random, datetime
rows, work = int(sys.argv[1]), sys.argv[2]
rng = random.Random(7)
span = 30 * 86400
start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
with open(f"{work}/requests.csv", "w", buffering=1 << 22) as f:
    for i in range(rows):
        t = (start + datetime.timedelta(seconds=i * span // rows)).strftime("%Y-%m-%d %H:%M:%S+00")
        u = rng.randrange(1000)
        f.write(f"user-{u:04d}@example.org,prompt {i} of user-{u:04d},{'small' if i % 2 else 'large'},{rng.randrange(4000)},{t}\n")
PY
chmod 755 "$WORK"; chmod 644 "$WORK/requests.csv"
TARGET="user-0042@example.org"

VIEWS=(
  "per_user|SELECT user_id, count(*) AS n, sum(tokens) AS t FROM requests GROUP BY user_id"
  "per_vendor|SELECT r.user_id, m.vendor, sum(r.tokens) AS t FROM requests r JOIN models m ON r.model = m.model GROUP BY r.user_id, m.vendor"
  "top_requests|SELECT user_id, prompt, tokens FROM requests ORDER BY tokens DESC, prompt LIMIT 10"
  "daily|SELECT user_id, date_bin(INTERVAL '1 day', at, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS day, count(*) AS n FROM requests GROUP BY 1, 2"
  "busy_users|SELECT user_id, n FROM per_user WHERE n > 9000"
)

"$SLUICE" serve --listen 127.0.0.1:$SLUICE_PORT --data-dir "$WORK/sluice" --http-listen off 2>"$WORK/sluice.log" &
SLUICE_PID=$!
S="psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $SLUICE_PORT -U b -d b"
for _ in $(seq 100); do $S -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
$S -c "CREATE TABLE models (model TEXT, vendor TEXT) APPEND ONLY" \
   -c "INSERT INTO models VALUES ('small', 'acme'), ('large', 'globex')" \
   -c "CREATE TABLE requests (user_id TEXT, prompt TEXT, model TEXT, tokens INT, at TIMESTAMPTZ) APPEND ONLY WITH (partitions = 4)"
$S -c "\copy requests FROM '$WORK/requests.csv' WITH (FORMAT csv)"
for v in "${VIEWS[@]}"; do $S -c "CREATE MATERIALIZED VIEW ${v%%|*} AS ${v#*|}"; done
$S -c "FLUSH"
# Let the background task move the closed segments to the object store.
size() { du -sb "$WORK/sluice/objects/tables" 2>/dev/null | cut -f1 || echo 0; }
PREV=-1
for _ in $(seq 120); do CUR=$(size); [ "$CUR" = "$PREV" ] && break; PREV=$CUR; sleep 3; done
TABLE_BYTES=$(( $(size) + $(du -sb "$WORK/sluice/tables" | cut -f1) ))
CPU0=$(awk '{print $14 + $15}' /proc/$SLUICE_PID/stat)
t0=$(now); $S -c "DELETE FROM requests WHERE user_id = '$TARGET'"; t1=$(now)
CPU1=$(awk '{print $14 + $15}' /proc/$SLUICE_PID/stat)
REMOVED=$($S -At -c "SELECT rows_removed FROM sluice_catalog.erasures WHERE erasure = 1")
STATUS=$($S -At -c "SELECT status FROM sluice_catalog.erasures WHERE erasure = 1")
[ "$STATUS" = "done" ] || { echo "erasure status: $STATUS"; exit 1; }
FILES=$($S -At -c "SELECT files_rewritten FROM sluice_catalog.erasures WHERE erasure = 1")
REWRITTEN=0
for f in $($S -At -c "SELECT rewritten FROM sluice_catalog.erasures WHERE erasure = 1" | awk '{print $1}' | sed 's|^file://||'); do
  [ -f "$f" ] && REWRITTEN=$((REWRITTEN + $(stat -c %s "$f")))
done
t2=$(now); FINDINGS=$($S -At -c "VERIFY ERASURE 1" | wc -l); t3=$(now)
LEFT=$($S -At -c "SELECT count(*) FROM requests WHERE user_id = '$TARGET'")
[ "$LEFT" = "0" ] || { echo "sluice still has $LEFT rows"; exit 1; }
kill $SLUICE_PID; wait $SLUICE_PID 2>/dev/null || true; SLUICE_PID=

mkdir -p "$WORK/pg"; chown postgres "$WORK" "$WORK/pg"
su postgres -c "$PGBIN/initdb -D $WORK/pg -A trust -U postgres" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1' -l $WORK/pg.log start" >/dev/null
P="psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $PG_PORT -U postgres"
for _ in $(seq 100); do $P -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
$P -c "CREATE TABLE models (model TEXT, vendor TEXT)" \
   -c "INSERT INTO models VALUES ('small', 'acme'), ('large', 'globex')" \
   -c "CREATE TABLE requests (user_id TEXT, prompt TEXT, model TEXT, tokens INT, at TIMESTAMPTZ)" \
   -c "\copy requests FROM '$WORK/requests.csv' WITH (FORMAT csv)"
for v in "${VIEWS[@]}"; do $P -c "CREATE MATERIALIZED VIEW ${v%%|*} AS ${v#*|}"; done
PG_BYTES=$($P -At -c "SELECT pg_total_relation_size('requests')")
t4=$(now); $P -c "DELETE FROM requests WHERE user_id = '$TARGET'" -c "VACUUM FULL requests"; t5=$(now)
for v in "${VIEWS[@]}"; do $P -c "REFRESH MATERIALIZED VIEW ${v%%|*}"; done; t6=$(now)
PG_AFTER=$($P -At -c "SELECT pg_total_relation_size('requests')")

python3 - "$ROWS" "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" "$t6" "$REMOVED" "$FILES" "$REWRITTEN" "$TABLE_BYTES" "$PG_BYTES" "$PG_AFTER" "$FINDINGS" "$CPU0" "$CPU1" <<'PY'
import sys, os
rows = int(sys.argv[1])
t0, t1, t2, t3, t4, t5, t6 = map(float, sys.argv[2:9])
removed, files, rewritten, table, pg, pg_after, findings = map(int, sys.argv[9:16])
cpu = (int(sys.argv[17]) - int(sys.argv[16])) / os.sysconf("SC_CLK_TCK")
s, p, pv = t1 - t0, t5 - t4, t6 - t4
print("| rows | erased | Sluice DELETE (erasure, 5 views rebuilt) | server CPU | objects rewritten | bytes rewritten | table bytes | PostgreSQL 15 DELETE + VACUUM FULL | bytes rewritten | + REFRESH of 5 matviews | ratio (Sluice / PG with views) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| {rows:,} | {removed:,} | {s:.1f} s | {cpu:.1f} s | {files} | {rewritten / 2**20:.0f} MiB | {table / 2**20:.0f} MiB | {p:.1f} s | {pg_after / 2**20:.0f} MiB (of {pg / 2**20:.0f}) | {pv:.1f} s | {s / pv:.2f}x |")
print()
print(f"VERIFY ERASURE 1: {t3 - t2:.1f} s, {findings} findings")
PY
