#!/usr/bin/env bash
# Keyed tables: upsert throughput (KEYS keys, ROUNDS updates of each, by
# COPY) against PostgreSQL 15 doing the same upserts (COPY into a staging
# table, then INSERT ... ON CONFLICT DO UPDATE); compaction throughput and
# space reclaimed (VACUUM); and how long an upsert takes to show in a view
# (INSERT acknowledged, then FLUSH, then the view read).
#
#   bash benches/keyed.sh [keys] [rounds]      (default 1000000 10)
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS="${1:-1000000}"
ROUNDS="${2:-10}"
WORK="$(mktemp -d /tmp/sluice-bench.XXXXXX)"
SLUICE_PORT=5495
PG_PORT=5496
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

# One CSV per round: every key once, with a new value.
python3 - "$KEYS" "$ROUNDS" "$WORK" <<'PY'
import sys, random
keys, rounds, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(7)
for r in range(rounds):
    with open(f"{work}/round{r}.csv", "w", buffering=1 << 20) as f:
        f.write("".join(f"key-{k:07d},tenant-{k % 50:02d},{rng.randrange(1_000_000)}\n" for k in range(keys)))
PY

"$SLUICE" serve --listen 127.0.0.1:$SLUICE_PORT --data-dir "$WORK/sluice" --segment-bytes 16777216 \
  --compaction-interval-ms 3600000 2>"$WORK/sluice.log" &
SLUICE_PID=$!
S="psql -X -q -h 127.0.0.1 -p $SLUICE_PORT -U b -d b"
for _ in $(seq 100); do $S -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
$S -c "CREATE TABLE kv (k TEXT PRIMARY KEY, tenant TEXT, v BIGINT) WITH (partitions = 4, delete_retention = '0s')"
t0=$(now)
for r in $(seq 0 $((ROUNDS - 1))); do $S -c "\copy kv FROM '$WORK/round$r.csv' WITH (FORMAT csv)"; done
t1=$(now)
LIVE=$($S -At -c "SELECT COUNT(*) FROM kv")
[ "$LIVE" = "$KEYS" ] || { echo "sluice has $LIVE live keys"; exit 1; }
# Let the background task move the closed segments to the object store
# (until its size holds still), then measure compaction alone.
size() { du -sb "$WORK/sluice/objects/tables" 2>/dev/null | cut -f1 || echo 0; }
PREV=-1
for _ in $(seq 120); do CUR=$(size); [ "$CUR" = "$PREV" ] && break; PREV=$CUR; sleep 3; done
BEFORE=$(size)
t2=$(now); $S -c "VACUUM kv"; t3=$(now)
AFTER=$(size)
REMOVED=$($S -At -c "SELECT SUM(compacted_records) FROM sluice_catalog.partitions WHERE table_name = 'kv'")
LIVE=$($S -At -c "SELECT COUNT(*) FROM kv")
[ "$LIVE" = "$KEYS" ] || { echo "after compaction sluice has $LIVE live keys"; exit 1; }
LOCAL=$(du -sb "$WORK/sluice/tables" | cut -f1)

# View latency: upsert a key, FLUSH, read the view.
$S -c "CREATE MATERIALIZED VIEW per_tenant AS SELECT tenant, COUNT(*) AS n, SUM(v) AS s FROM kv GROUP BY tenant"
$S -c "FLUSH"
LAT=$(python3 - $SLUICE_PORT <<'PY'
import sys, time, statistics, psycopg
c = psycopg.connect(f"host=127.0.0.1 port={sys.argv[1]} user=b dbname=b", autocommit=True)
ms = []
for i in range(200):
    t = time.perf_counter()
    c.execute(f"INSERT INTO kv VALUES ('key-{i:07d}', 'tenant-00', {10**9 + i})")
    acked = time.perf_counter()
    c.execute("FLUSH")
    s = c.execute("SELECT s FROM per_tenant WHERE tenant = 'tenant-00'").fetchone()[0]
    ms.append((time.perf_counter() - acked) * 1000)
ms.sort()
print(f"{statistics.median(ms):.1f} {ms[int(len(ms) * 0.99) - 1]:.1f}")
PY
)
kill $SLUICE_PID; wait $SLUICE_PID 2>/dev/null || true; SLUICE_PID=

mkdir -p "$WORK/pg"; chown postgres "$WORK" "$WORK/pg"; chmod 755 "$WORK"; chmod 644 "$WORK"/round*.csv
su postgres -c "$PGBIN/initdb -D $WORK/pg -A trust -U postgres" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1' -l $WORK/pg.log start" >/dev/null
P="psql -X -q -h 127.0.0.1 -p $PG_PORT -U postgres"
for _ in $(seq 100); do $P -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
$P -c "CREATE TABLE kv (k TEXT PRIMARY KEY, tenant TEXT, v BIGINT)"
$P -c "CREATE UNLOGGED TABLE staging (k TEXT, tenant TEXT, v BIGINT)"
t4=$(now)
for r in $(seq 0 $((ROUNDS - 1))); do
  $P -c "TRUNCATE staging" -c "\copy staging FROM '$WORK/round$r.csv' WITH (FORMAT csv)" \
     -c "INSERT INTO kv SELECT * FROM staging ON CONFLICT (k) DO UPDATE SET tenant = EXCLUDED.tenant, v = EXCLUDED.v"
done
t5=$(now)

python3 - "$KEYS" "$ROUNDS" "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" "$BEFORE" "$AFTER" "$REMOVED" "$LOCAL" "$LAT" <<'PY'
import sys
keys, rounds = int(sys.argv[1]), int(sys.argv[2])
t0, t1, t2, t3, t4, t5 = map(float, sys.argv[3:9])
before, after, removed, local = int(sys.argv[9]), int(sys.argv[10]), int(sys.argv[11] or 0), int(sys.argv[12])
p50, p99 = sys.argv[13].split()
n = keys * rounds
s, p = n / (t1 - t0), n / (t5 - t4)
print("| keys | upserts | Sluice upserts/s (COPY) | PostgreSQL 15 upserts/s (COPY + ON CONFLICT DO UPDATE) | ratio |")
print("|---|---|---|---|---|")
print(f"| {keys:,} | {n:,} | {s:,.0f} ({t1 - t0:.1f} s) | {p:,.0f} ({t5 - t4:.1f} s) | {s / p:.2f}x |")
print()
mb = before / 2**20
print("| compaction (VACUUM) | MiB rewritten/s | records removed | segment objects before | after | reclaimed | active segments (not compacted) |")
print("|---|---|---|---|---|---|---|")
print(f"| {t3 - t2:.1f} s | {mb / (t3 - t2):.0f} | {removed:,} | {mb:.0f} MiB | {after / 2**20:.0f} MiB | {(before - after) / max(before, 1):.0%} | {local / 2**20:.0f} MiB |")
print()
print(f"view latency after INSERT acknowledged, FLUSH then read (200 upserts): median {p50} ms, p99 {p99} ms")
PY
