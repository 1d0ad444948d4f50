#!/usr/bin/env bash
# Binary COPY against text (CSV) COPY into Sluice, same rows, same client
# (psql \copy), same run. The binary file is one Sluice wrote itself with
# COPY (...) TO STDOUT WITH (FORMAT binary). Each load goes into a fresh
# 4-partition table, ROUNDS times each, alternating.
#
#   bash benches/binary_copy.sh [rows] [rounds]     (default 2000000 2)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-2000000}"
ROUNDS="${2:-2}"
WORK="$(mktemp -d /tmp/sluice-bincopy.XXXXXX)"
PORT=5479
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

cargo build --profile "${SLUICE_PROFILE:-release}" --bin sluice -q
SLUICE="$CARGO_TARGET_DIR/${SLUICE_PROFILE:-release}/sluice"

cleanup() {
  [ -n "${SLUICE_PID:-}" ] && kill "$SLUICE_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 benches/gen_usage.py "$ROWS" "$WORK/usage.csv"
"$SLUICE" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/sluice" 2>"$WORK/sluice.log" &
SLUICE_PID=$!
for _ in $(seq 100); do psql -h 127.0.0.1 -p $PORT -U b -d b -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
sql() { psql -q -h 127.0.0.1 -p $PORT -U b -d b "$@"; }
SCHEMA="(event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')"

sql -c "CREATE TABLE src $SCHEMA" -c "\copy src FROM '$WORK/usage.csv' WITH (FORMAT csv)"
sql -c "\copy (SELECT event_id, tenant, tokens, event_time FROM src) TO '$WORK/usage.bin' WITH (FORMAT binary)"
ls -la "$WORK/usage.csv" "$WORK/usage.bin"

# load NAME FORMAT FILE: seconds to load FILE into a new table NAME.
load() {
  sql -c "CREATE TABLE $1 $SCHEMA"
  local t0 t1 n
  t0=$(date +%s.%N)
  sql -c "\copy $1 FROM '$3' WITH (FORMAT $2)"
  t1=$(date +%s.%N)
  n=$(psql -tA -h 127.0.0.1 -p $PORT -U b -d b -c "SELECT COUNT(*) FROM $1")
  [ "$n" = "$ROWS" ] || { echo "$1 has $n rows, expected $ROWS" >&2; exit 1; }
  python3 -c "print(f'{$t1 - $t0:.2f}')"
}

CSV=(); BIN=()
for r in $(seq "$ROUNDS"); do
  CSV+=("$(load csv_$r csv "$WORK/usage.csv")")
  BIN+=("$(load bin_$r binary "$WORK/usage.bin")")
done
# The binary loads must hold what the CSV loads hold.
same=$(psql -tA -h 127.0.0.1 -p $PORT -U b -d b -c "SELECT (SELECT SUM(tokens) FROM csv_1) = (SELECT SUM(tokens) FROM bin_1) AND (SELECT MAX(event_time) FROM csv_1) = (SELECT MAX(event_time) FROM bin_1)")
[ "$same" = "t" ] || { echo "binary and CSV loads differ" >&2; exit 1; }

python3 - "$ROWS" "${CSV[*]}" "${BIN[*]}" <<'PY'
import sys
rows = int(sys.argv[1])
csv = [float(x) for x in sys.argv[2].split()]
b = [float(x) for x in sys.argv[3].split()]
r = lambda xs: f"{min(xs):.2f}-{max(xs):.2f} s (about {rows / (sum(xs) / len(xs)) / 1e6:.1f} M rows/s)"
print("| rows | CSV COPY | binary COPY | binary / CSV |")
print("|---|---|---|---|")
print(f"| {rows:,} | {r(csv)} | {r(b)} | {sum(csv) / sum(b):.2f}x |")
PY
