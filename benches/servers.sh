# Sourced by the benchmark scripts that compare Sluice with PostgreSQL 15:
# a release Sluice and a PostgreSQL server on loopback, the usage rows
# (benches/gen_usage.py) loaded into both, everything removed on exit.
# The caller sets WORK (a fresh directory), SLUICE_PORT and PG_PORT.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
PGBIN=/usr/lib/postgresql/15/bin

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"

cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  [ -d "$WORK/pg" ] && su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

sluice_sql() { psql -q -h 127.0.0.1 -p "$SLUICE_PORT" -U sluice -d sluice -c "$1"; }
pg_sql() { psql -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -c "$1"; }

# $1 rows of usage: a Sluice table (4 partitions by tenant) and a
# PostgreSQL table, same rows, PostgreSQL's analyzed.
load_usage_into_both() {
  echo "generating $1 rows"
  python3 benches/gen_usage.py "$1" "$WORK/usage.csv"
  "$SLUICE" serve --listen "127.0.0.1:$SLUICE_PORT" --data-dir "$WORK/sluice" --http-listen off 2>"$WORK/sluice.log" &
  SLUICE_PID=$!
  for _ in $(seq 100); do sluice_sql 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
  sluice_sql "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"
  sluice_sql "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
  mkdir -p "$WORK/pg"; chown postgres "$WORK" "$WORK/pg"; chmod 755 "$WORK"; chmod 644 "$WORK/usage.csv"
  su postgres -c "$PGBIN/initdb -D $WORK/pg -A trust -U postgres" >/dev/null
  su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1' -l $WORK/pg.log start" >/dev/null
  for _ in $(seq 100); do pg_sql 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
  pg_sql "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP)"
  pg_sql "\copy usage FROM '$WORK/usage.csv' WITH (FORMAT csv)"
  pg_sql "VACUUM ANALYZE usage"
}
