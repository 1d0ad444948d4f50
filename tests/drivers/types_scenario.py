"""Column types as drivers read them (psycopg 3 and asyncpg): JSONB comes
back as JSON, NUMERIC(12,3) with its precision and scale, VARCHAR(8) with
its length, from a table and from a materialized view over it. Exits
non-zero on a failure."""
import asyncio
import decimal
import sys

PORT = int(sys.argv[1])
DRIVER = sys.argv[2]
SETUP = [
    "CREATE TABLE typed (id INT, doc JSONB, n NUMERIC(12,3), v VARCHAR(8))",
    "INSERT INTO typed VALUES (1, '{\"a\": [1, 2]}', 1.5, 'abc')",
    "CREATE MATERIALIZED VIEW typed_view AS SELECT id, doc, n, v FROM typed",
    "FLUSH",
]
QUERIES = ["SELECT doc, n, v FROM typed", "SELECT doc, n, v FROM typed_view"]


def psycopg3():
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 port={PORT} user=sluice dbname=sluice", autocommit=True) as c:
        for sql in SETUP:
            c.execute(sql)
        for binary in (False, True):
            for sql in QUERIES:
                cur = c.cursor(binary=binary)
                cur.execute(sql)
                doc, n, v = cur.fetchone()
                assert doc == {"a": [1, 2]}, (sql, binary, doc)
                assert n == decimal.Decimal("1.500") and str(n) == "1.500", (sql, binary, n)
                assert v == "abc", (sql, v)
                d = {col.name: col for col in cur.description}
                assert d["doc"].type_code == 3802, d["doc"]
                assert (d["n"].type_code, d["n"].precision, d["n"].scale) == (1700, 12, 3), d["n"]
                assert (d["v"].type_code, d["v"].display_size) == (1043, 8), d["v"]


async def asyncpg_scenario():
    import asyncpg

    c = await asyncpg.connect(host="127.0.0.1", port=PORT, user="sluice", database="sluice")
    for sql in SETUP:
        await c.execute(sql)
    for sql in QUERIES:
        stmt = await c.prepare(sql)
        types = {a.name: a.type.name for a in stmt.get_attributes()}
        assert types == {"doc": "jsonb", "n": "numeric", "v": "varchar"}, types
        doc, n, v = await stmt.fetchrow()
        # asyncpg hands JSON over as its text unless a codec is set.
        assert doc == '{"a": [1, 2]}', doc
        assert str(n) == "1.500", n
        assert v == "abc", v
    await c.set_type_codec("jsonb", encoder=str, decoder=__import__("json").loads, schema="pg_catalog")
    assert await c.fetchval("SELECT doc FROM typed") == {"a": [1, 2]}
    await c.close()


if DRIVER == "psycopg":
    psycopg3()
else:
    asyncio.run(asyncpg_scenario())
print(f"{DRIVER} types ok")
