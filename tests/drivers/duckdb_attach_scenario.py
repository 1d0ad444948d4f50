"""DuckDB's postgres extension against Sluice, as a user attaches a
database: ATTACH, the tables DuckDB lists, a table, a keyed table and a
materialized view of every column type, a filtered and an ordered read with
a limit, a scan DuckDB splits into ctid ranges over several connections
sharing one exported snapshot (with rows committed while it reads, which
it must not see), and rows written through the attached database.

DuckDB's postgres extension comes from the package registry
(duckdb-ext-postgres, beside the duckdb release it was built for); this
machine has no access to DuckDB's own extension server.

Usage: duckdb_attach_scenario.py PORT. Exits non-zero on a failure."""
import datetime
import decimal
import glob
import os
import sys
import threading

import duckdb
import duckdb_ext
import psycopg

PORT = int(sys.argv[1])
EXTENSION = glob.glob(os.path.join(
    list(duckdb_ext.__path__)[0], "extensions", "*", "*", "postgres_scanner.duckdb_extension"))[0]
DSN = f"host=127.0.0.1 port={PORT} user=sluice dbname=sluice"

with psycopg.connect(DSN, autocommit=True) as pg:
    pg.execute(
        "CREATE TABLE events (id BIGINT NOT NULL, name TEXT, amount NUMERIC(12,3), "
        "ratio DOUBLE PRECISION, small SMALLINT, flag BOOLEAN, day DATE, at TIMESTAMP, "
        "at_tz TIMESTAMPTZ, payload JSONB, code VARCHAR(8), raw BYTEA) WITH (partitions = 4)"
    )
    pg.execute(
        "INSERT INTO events VALUES "
        "(1, 'a', 1.5, 0.25, 7, true, '2026-01-01', '2026-01-01 10:00:00', "
        "'2026-01-01 10:00:00+00', '{\"k\": 1}', 'x1', '\\x0102'), "
        "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    pg.execute("INSERT INTO events (id, name) SELECT x, 'n' || x FROM generate_series(3, 20000) x")
    pg.execute("CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT)")
    pg.execute("INSERT INTO users VALUES (1, 'ann'), (2, 'bob')")
    pg.execute("UPDATE users SET name = 'bo' WHERE id = 2")
    pg.execute("CREATE MATERIALIZED VIEW per_name AS SELECT name, count(*) AS n FROM events WHERE id < 3 GROUP BY name")
    pg.execute("FLUSH")

con = duckdb.connect()
con.execute(f"LOAD '{EXTENSION}'")
con.execute(f"ATTACH '{DSN}' AS s (TYPE postgres)")

tables = {r[0] for r in con.execute(
    "SELECT table_name FROM duckdb_tables() WHERE database_name = 's' AND schema_name = 'public'"
).fetchall()}
views = {r[0] for r in con.execute(
    "SELECT view_name FROM duckdb_views() WHERE database_name = 's' AND schema_name = 'public'"
).fetchall()}
assert {"events", "users"} <= tables, tables
assert "per_name" in tables | views, (tables, views)

first = con.execute("SELECT * FROM s.public.events WHERE id = 1").fetchall()
assert first == [(
    1, "a", decimal.Decimal("1.500"), 0.25, 7, True, datetime.date(2026, 1, 1),
    datetime.datetime(2026, 1, 1, 10, 0), first[0][8], first[0][9], "x1", b"\x01\x02",
)], first
assert first[0][8].astimezone(datetime.timezone.utc) == datetime.datetime(
    2026, 1, 1, 10, 0, tzinfo=datetime.timezone.utc), first
assert "\"k\"" in str(first[0][9]), first
assert con.execute("SELECT * FROM s.public.events WHERE id = 2").fetchall() == [
    (2,) + (None,) * 11]
assert con.execute("SELECT * FROM s.public.users ORDER BY id").fetchall() == [(1, "ann"), (2, "bo")]
assert con.execute("SELECT * FROM s.public.per_name ORDER BY name NULLS FIRST").fetchall() == [
    (None, 1), ("a", 1)]
# A filtered and an ordered read with a limit.
assert con.execute(
    "SELECT id FROM s.public.events WHERE name LIKE 'n1%' ORDER BY id DESC LIMIT 3"
).fetchall() == [(19999,), (19998,), (19997,)]

# A scan split into ctid ranges of 3 blocks, each read by one of several
# connections importing the scan's snapshot; rows committed meanwhile are
# not seen.
con.execute("SET pg_pages_per_task = 3")
stop = threading.Event()


def keep_writing():
    with psycopg.connect(DSN, autocommit=True) as pg:
        n = 100000
        while not stop.is_set():
            pg.execute("INSERT INTO events (id) VALUES (%s)", (n,))
            n += 1


writer = threading.Thread(target=keep_writing)
writer.start()
try:
    for _ in range(3):
        count, distinct, total = con.execute(
            "SELECT count(*), count(DISTINCT id), sum(id) FROM s.public.events WHERE id < 100000"
        ).fetchall()[0]
        assert (count, distinct, total) == (20000, 20000, 20000 * 20001 // 2), (count, distinct, total)
        everything = con.execute("SELECT count(*), count(DISTINCT id) FROM s.public.events").fetchall()[0]
        assert everything[0] == everything[1] >= 20000, everything
finally:
    stop.set()
    writer.join()

# Rows written through the attached database.
con.execute("INSERT INTO s.public.users VALUES (3, 'cy')")
con.execute("CREATE TABLE s.public.copied AS SELECT id, name FROM s.public.events WHERE id <= 5")
with psycopg.connect(DSN, autocommit=True) as pg:
    assert pg.execute("SELECT name FROM users WHERE id = 3").fetchall() == [("cy",)]
    assert pg.execute("SELECT count(*) FROM copied").fetchall() == [(5,)]
print("duckdb attach ok")
