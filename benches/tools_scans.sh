#!/usr/bin/env bash
# Scans by the tools users point at a database, Sluice against PostgreSQL 15,
# same rows, same client, same run:
# - DuckDB's ATTACH (postgres extension): sum over a table, which DuckDB
#   splits into ctid ranges read in parallel under one exported snapshot;
# - Spark's JDBC source (pgJDBC), numPartitions = 4 on a numeric column.
#
#   bash benches/tools_scans.sh [rows]      (default 10000000)
# Needs the tools virtualenv .ci/run makes ($HOME/.cache/sluice-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-10000000}"
WORK="$(mktemp -d /tmp/sluice-bench.XXXXXX)"
SLUICE_PORT=5477
PG_PORT=5478
TOOLS="${SLUICE_TOOLS:-$HOME/.cache/sluice-tools}"
. benches/servers.sh
load_usage_into_both "$ROWS"

"$TOOLS/bin/python" - "$ROWS" "$SLUICE_PORT" "$PG_PORT" <<'PY'
import glob, os, sys, time
import duckdb, duckdb_ext
from pyspark.sql import SparkSession

rows, sluice, pg = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ext = glob.glob(os.path.join(list(duckdb_ext.__path__)[0], "extensions", "*", "*",
                             "postgres_scanner.duckdb_extension"))[0]
targets = {"Sluice": f"host=127.0.0.1 port={sluice} user=sluice dbname=sluice",
           "PostgreSQL": f"host=127.0.0.1 port={pg} user=postgres dbname=postgres"}

def duck(dsn):
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    con.execute(f"ATTACH '{dsn}' AS s (TYPE postgres, READ_ONLY)")
    t0 = time.time()
    n, total = con.execute("SELECT count(tenant), sum(tokens) FROM s.public.usage").fetchone()
    elapsed = time.time() - t0
    assert n == rows, n
    return elapsed, total

spark = (SparkSession.builder.master("local[4]").config("spark.jars", "/usr/share/java/postgresql.jar")
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def spark_read(port, user, db):
    url = f"jdbc:postgresql://127.0.0.1:{port}/{db}"
    props = {"user": user, "password": "", "driver": "org.postgresql.Driver", "fetchsize": "10000"}
    df = spark.read.jdbc(url, "usage", column="tokens", lowerBound=0, upperBound=1000,
                         numPartitions=4, properties=props)
    t0 = time.time()
    got = df.selectExpr("count(tenant) AS n", "sum(tokens) AS t").collect()[0]
    elapsed = time.time() - t0
    assert got.n == rows, got
    return elapsed, got.t

d = {k: duck(v) for k, v in targets.items()}
assert d["Sluice"][1] == d["PostgreSQL"][1]
s = {"Sluice": spark_read(sluice, "sluice", "sluice"), "PostgreSQL": spark_read(pg, "postgres", "postgres")}
assert s["Sluice"][1] == s["PostgreSQL"][1]
spark.stop()
print("| scan | rows | Sluice rows/s | PostgreSQL 15 rows/s | ratio |")
print("|---|---|---|---|---|")
for name, r in (("DuckDB ATTACH, sum over the table", d), ("Spark JDBC, 4 partitions on tokens", s)):
    a, b = rows / r["Sluice"][0], rows / r["PostgreSQL"][0]
    print(f"| {name} | {rows:,} | {a:,.0f} ({r['Sluice'][0]:.2f} s) | {b:,.0f} ({r['PostgreSQL'][0]:.2f} s) | {a / b:.2f}x |")
PY
