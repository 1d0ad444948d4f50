"""asyncpg against Sluice: prepared statements, executemany, binary COPY in
(copy_records_to_table), COPY out (copy_from_query), parameters of every
type, NULLs, and errors with their SQLSTATE. Exits non-zero on a failure."""
import asyncio
import datetime
import decimal
import io
import sys

import asyncpg

PORT = int(sys.argv[1])


async def main():
    c = await asyncpg.connect(host="127.0.0.1", port=PORT, user="asyncpg", database="sluice")
    await c.execute(
        "CREATE TABLE apg (id BIGINT NOT NULL, small SMALLINT, i INT, r REAL, d DOUBLE PRECISION, "
        "n NUMERIC(12,3), name TEXT, v VARCHAR(8), flag BOOLEAN, raw BYTEA, day DATE, "
        "at TIMESTAMP, at_tz TIMESTAMPTZ, doc JSONB)"
    )
    row = (
        1, 2, 3, 1.5, 2.25, decimal.Decimal("12345.678"), "héllo", "v", True, b"\x00\xff",
        datetime.date(2026, 1, 2), datetime.datetime(2026, 1, 2, 3, 4, 5, 678901),
        datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc), '{"a": 1}',
    )
    insert = "INSERT INTO apg VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
    await c.execute(insert, *row)
    await c.executemany(insert, [(2,) + (None,) * 13, (3,) + row[1:]])
    # Binary COPY: what copy_records_to_table sends.
    n = await c.copy_records_to_table(
        "apg", records=[(10 + k,) + row[1:] for k in range(500)] + [(999,) + (None,) * 13]
    )
    assert n == "COPY 501", n
    stmt = await c.prepare("SELECT * FROM apg WHERE id = $1")
    got = await stmt.fetchrow(10)
    assert tuple(got) == (10,) + row[1:13] + ('{"a": 1}',), tuple(got)
    nulls = await stmt.fetchrow(999)
    assert all(v is None for v in tuple(nulls)[1:]), nulls
    assert await c.fetchval("SELECT count(*) FROM apg") == 504
    # An invalid binary COPY stores nothing: NULL into a NOT NULL column.
    try:
        await c.copy_records_to_table("apg", records=[(20,) + row[1:], (None,) + row[1:]])
        raise AssertionError("COPY with a NULL id was accepted")
    except asyncpg.PostgresError as e:
        assert e.sqlstate == "23502", (e.sqlstate, e)
    assert await c.fetchval("SELECT count(*) FROM apg") == 504
    out = io.BytesIO()
    await c.copy_from_query("SELECT id, name FROM apg WHERE id < 3 ORDER BY id", output=out, format="csv")
    assert out.getvalue() == b"1,h\xc3\xa9llo\n2,\n", out.getvalue()
    # Errors carry their SQLSTATE.
    for sql, state in [("SELECT * FROM missing", "42P01"), ("SELEC 1", "42601"),
                       ("SELECT nope FROM apg", "42703")]:
        try:
            await c.fetch(sql)
            raise AssertionError(f"{sql} did not fail")
        except asyncpg.PostgresError as e:
            assert e.sqlstate == state, (sql, e.sqlstate, e)
    # Arrays of types asyncpg has no built-in codec for: it looks them up
    # in pg_type first (its recursive type query).
    got = await c.fetchrow("SELECT array_agg(flag) AS flags, array_agg(small) AS smalls, "
                           "array_agg(id ORDER BY id) AS ids FROM apg WHERE id IN (1, 3)")
    assert got["flags"] == [True, True] and got["smalls"] == [2, 2] and got["ids"] == [1, 3], got
    version = await c.fetchval("SELECT version()")
    assert version.startswith("PostgreSQL 16.6 (Sluice"), version
    await transactions(c)
    await c.close()
    print("asyncpg scenario ok")


async def transactions(c):
    """transaction(): rolled back on an exception, nested ones as savepoints,
    COPY inside; nothing visible to others before the commit."""
    other = await asyncpg.connect(host="127.0.0.1", port=PORT, user="asyncpg", database="sluice")
    await c.execute("CREATE TABLE atx (id BIGINT PRIMARY KEY, v TEXT)")
    try:
        async with c.transaction():
            await c.executemany("INSERT INTO atx VALUES ($1, $2)", [(i, "x") for i in range(10)])
            await c.copy_records_to_table("atx", records=[(20, "c"), (21, "c")])
            assert await c.fetchval("SELECT count(*) FROM atx") == 12
            assert await other.fetchval("SELECT count(*) FROM atx") == 0
            raise RuntimeError("abandon")
    except RuntimeError:
        pass
    assert await other.fetchval("SELECT count(*) FROM atx") == 0
    async with c.transaction():
        await c.executemany("INSERT INTO atx VALUES ($1, $2)", [(i, "x") for i in range(10)])
        try:
            async with c.transaction():
                await c.execute("DELETE FROM atx WHERE id < 5")
                await c.execute("SELECT 1/0")
        except asyncpg.exceptions.DivisionByZeroError:
            pass
        await c.execute("UPDATE atx SET v = 'y' WHERE id = 9")
    assert await other.fetchval("SELECT count(*) FROM atx") == 10
    assert await other.fetchval("SELECT v FROM atx WHERE id = 9") == "y"
    # UPDATE and DELETE with parameters (prepared, as asyncpg always does).
    assert await c.execute("UPDATE atx SET v = $1 WHERE id = $2", "z", 8) == "UPDATE 1"
    assert await c.execute("DELETE FROM atx WHERE id = $1", 7) == "DELETE 1"
    assert await other.fetchval("SELECT v FROM atx WHERE id = 8") == "z"
    assert await other.fetchval("SELECT count(*) FROM atx") == 9
    # REPEATABLE READ: one snapshot; a key another connection updated
    # since fails the commit with SerializationError (40001).
    try:
        async with c.transaction(isolation="repeatable_read"):
            before = await c.fetchval("SELECT count(*) FROM atx")
            await other.execute("INSERT INTO atx VALUES (100, 'new'), (9, 'other')")
            assert await c.fetchval("SELECT count(*) FROM atx") == before
            await c.execute("UPDATE atx SET v = 'mine' WHERE id = 9")
        raise AssertionError("a stale update committed")
    except asyncpg.exceptions.SerializationError:
        pass
    assert await other.fetchval("SELECT v FROM atx WHERE id = 9") == "other"
    async with c.transaction(readonly=True):
        try:
            await c.execute("INSERT INTO atx VALUES (200, 'ro')")
            raise AssertionError("a write in a read-only transaction")
        except asyncpg.exceptions.ReadOnlySQLTransactionError:
            pass
    # A timeout sends a cancel request; the connection stays usable.
    long_query = "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b"
    try:
        await c.fetch(long_query, timeout=0.5)
        raise AssertionError("the query finished")
    except asyncio.TimeoutError:
        pass
    assert await c.fetchval("SELECT 2") == 2
    await c.execute("SET statement_timeout = '200ms'")
    try:
        await c.fetch("SELECT pg_sleep(5)")
        raise AssertionError("pg_sleep outlived statement_timeout")
    except asyncpg.exceptions.QueryCanceledError as e:
        assert "statement timeout" in str(e), e
    await c.execute("RESET statement_timeout")
    await other.close()


asyncio.run(main())
