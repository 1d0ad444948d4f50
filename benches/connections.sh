#!/usr/bin/env bash
# New connections per second, as a pool's cold start or a CGI-style client
# makes them: pgbench -C (a new connection for every transaction of one
# `SELECT 1`), against Sluice and PostgreSQL 15 in the same run, each with
# SCRAM-SHA-256 (4,096 iterations) over plain TCP, then over TLS
# (sslmode=require, one ECDSA P-256 certificate for both servers).
#
#   bash benches/connections.sh [seconds per run]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-10}"
CLIENTS="${CLIENTS:-4}"
WORK="$(mktemp -d /tmp/sluice-connections.XXXXXX)"
SLUICE_PORT=5487
PG_PORT=5488
PASSWORD='bench-secret'
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

if [ ! -x /usr/lib/postgresql/15/bin/pg_ctl ]; then
  apt-get update -qq && apt-get install -y -qq postgresql-15 postgresql-contrib >/dev/null
fi
PGBIN=/usr/lib/postgresql/15/bin
PGBENCH="$(command -v pgbench || echo $PGBIN/pgbench)"

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"

cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  [ -d "$WORK/pg" ] && su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 777 "$WORK"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$WORK/server.key" -out "$WORK/server.pem" -days 2 -subj /CN=localhost \
  -addext basicConstraints=critical,CA:FALSE -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
echo 'SELECT 1;' >"$WORK/select1.sql"
export PGPASSWORD="$PASSWORD"

# run NAME PORT USER SSLMODE: connections per second.
run() {
  local name=$1 port=$2 user=$3 sslmode=$4
  PGSSLMODE=$sslmode "$PGBENCH" -n -C -c "$CLIENTS" -j 2 -T "$SECS" \
    -h 127.0.0.1 -p "$port" -U "$user" -f "$WORK/select1.sql" "$user" >"$WORK/$name.out" 2>&1 \
    || { cat "$WORK/$name.out"; exit 1; }
  python3 -c "import re,sys; print(round(float(re.search(r'tps = ([0-9.]+)', open(sys.argv[1]).read()).group(1))))" "$WORK/$name.out"
}

# --- Sluice: SCRAM (the superuser has a password), TLS offered ---
SLUICE_PASSWORD="$PASSWORD" "$SLUICE" serve --listen 127.0.0.1:$SLUICE_PORT --data-dir "$WORK/sluice" \
  --http-listen off --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key" 2>"$WORK/sluice.log" &
SLUICE_PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $SLUICE_PORT -U sluice -d sluice -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
S_PLAIN=$(run sluice_plain $SLUICE_PORT sluice disable)
S_TLS=$(run sluice_tls $SLUICE_PORT sluice require)
kill $SLUICE_PID; wait $SLUICE_PID 2>/dev/null || true; SLUICE_PID=

# --- PostgreSQL 15: scram-sha-256 for every host connection, ssl on ---
mkdir -p "$WORK/pg"; chown postgres "$WORK/pg"
echo "$PASSWORD" >"$WORK/pwfile"; chown postgres "$WORK/pwfile" "$WORK/server.pem" "$WORK/server.key"
chmod 600 "$WORK/server.key"
su postgres -c "$PGBIN/initdb -D $WORK/pg -A scram-sha-256 -U postgres --pwfile=$WORK/pwfile" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file=$WORK/server.pem -c ssl_key_file=$WORK/server.key' -l $WORK/pg.log start" >/dev/null
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PG_PORT -U postgres -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
P_PLAIN=$(run postgres_plain $PG_PORT postgres disable)
P_TLS=$(run postgres_tls $PG_PORT postgres require)

python3 - "$CLIENTS" "$S_PLAIN" "$P_PLAIN" "$S_TLS" "$P_TLS" <<'PY'
import sys
clients, sp, pp, st, pt = sys.argv[1], *map(float, sys.argv[2:])
print(f"clients: {clients}; one SELECT 1 per connection")
print("| login | Sluice connections/s | PostgreSQL 15 connections/s | ratio |")
print("|---|---|---|---|")
print(f"| SCRAM-SHA-256, plain TCP | {sp:,.0f} | {pp:,.0f} | {sp / pp:.2f}x |")
print(f"| SCRAM-SHA-256, TLS | {st:,.0f} | {pt:,.0f} | {st / pt:.2f}x |")
PY
