"""SQLAlchemy 2 Core over psycopg2 and asyncpg, psycopg2 directly, and
pandas read_sql / to_sql against Sluice. Exits non-zero on a failure."""
import asyncio
import sys

import pandas as pd
import psycopg2
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

PORT = int(sys.argv[1])

# psycopg2 directly: client-side parameters, executemany, COPY in, errors.
conn = psycopg2.connect(host="127.0.0.1", port=PORT, user="pg2", dbname="sluice")
conn.autocommit = True
cur = conn.cursor()
cur.execute("CREATE TABLE pg2 (id BIGINT NOT NULL, name TEXT, amount NUMERIC(10,2))")
cur.execute("INSERT INTO pg2 VALUES (%s, %s, %s)", (1, "a", "1.50"))
cur.executemany("INSERT INTO pg2 VALUES (%s, %s, %s)", [(2, None, None), (3, "c", "3.25")])
import io
cur.copy_expert("COPY pg2 FROM STDIN WITH (FORMAT csv)", io.StringIO("4,d,4.00\n5,e,5.00\n"))
cur.execute("SELECT id, name, amount FROM pg2 WHERE id >= %s ORDER BY id", (2,))
rows = cur.fetchall()
assert [r[0] for r in rows] == [2, 3, 4, 5] and rows[0][1] is None, rows
try:
    cur.execute("INSERT INTO pg2 VALUES (NULL, 'x', 1)")
    raise AssertionError("NULL id accepted")
except psycopg2.Error as e:
    assert e.pgcode == "23502", e.pgcode
conn.close()

# SQLAlchemy Core through psycopg2: connect (parses version()), bound
# parameters, reflection of table names.
engine = sa.create_engine(f"postgresql+psycopg2://sa@127.0.0.1:{PORT}/sluice")
with engine.connect() as c:
    c.execute(sa.text("CREATE TABLE sa_events (id BIGINT NOT NULL, kind TEXT)"))
    c.execute(sa.text("INSERT INTO sa_events VALUES (:id, :kind)"), [{"id": i, "kind": "k%d" % (i % 3)} for i in range(30)])
    c.commit()
    n = c.execute(sa.text("SELECT count(*) FROM sa_events WHERE kind = :k"), {"k": "k1"}).scalar()
    assert n == 10, n
    inspector = sa.inspect(c)
    names = inspector.get_table_names()
    assert "sa_events" in names and "pg2" in names, names
    # Column reflection of a table and of a materialized view.
    c.execute(sa.text("CREATE MATERIALIZED VIEW sa_kinds AS SELECT kind, count(*) AS n FROM sa_events GROUP BY kind"))
    inspector = sa.inspect(c)
    assert "sa_kinds" in inspector.get_materialized_view_names(), inspector.get_materialized_view_names()
    assert "sa_kinds" not in inspector.get_table_names()
    cols = [(x["name"], str(x["type"]), x["nullable"]) for x in inspector.get_columns("sa_events")]
    assert cols == [("id", "BIGINT", False), ("kind", "TEXT", True)], cols
    cols = [(x["name"], str(x["type"])) for x in inspector.get_columns("sa_kinds")]
    assert cols == [("kind", "TEXT"), ("n", "BIGINT")], cols
    # pandas through the same engine.
    df = pd.read_sql("SELECT kind, count(*) AS n FROM sa_events GROUP BY kind ORDER BY kind", c)
    assert list(df["n"]) == [10, 10, 10], df
    pd.DataFrame({"id": [100, 101], "kind": ["p", None]}).to_sql("sa_events", c, if_exists="append", index=False)
    c.commit()
    assert c.execute(sa.text("SELECT count(*) FROM sa_events")).scalar() == 32


# The ORM: a mapped class, a session that adds and queries.
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "sa_items"
    id: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(sa.Text, nullable=True)


with engine.begin() as c:
    c.exec_driver_sql("CREATE TABLE sa_items (id BIGINT PRIMARY KEY, name TEXT)")
    c.exec_driver_sql('CREATE TABLE "SaPairs" (region TEXT, "Id" BIGINT, note TEXT, PRIMARY KEY (region, "Id"))')


def reflect_everything(c):
    """Whole-schema reflection as an application or Alembic does it: every
    table and view, with primary keys, indexes and constraints."""
    md = sa.MetaData()
    md.reflect(c, views=True)
    items = md.tables["sa_items"]
    assert [x.name for x in items.primary_key] == ["id"], items.primary_key
    assert not items.c.id.nullable and items.c.name.nullable
    pairs = md.tables["SaPairs"]
    assert [x.name for x in pairs.primary_key] == ["region", "Id"], pairs.primary_key
    assert [x.name for x in md.tables["sa_events"].primary_key] == []
    assert "sa_kinds" in md.tables
    # The system tables are not on the search path: not in the default
    # schema's reflection, but there when their schema is named.
    assert "lag" not in md.tables, sorted(md.tables)
    assert "lag" in sa.inspect(c).get_view_names(schema="sluice_catalog")
    i = sa.inspect(c)
    assert i.get_pk_constraint("sa_items")["name"] == "sa_items_pkey"
    assert i.get_indexes("sa_items") == [] and i.get_foreign_keys("sa_items") == []
    assert i.get_unique_constraints("SaPairs") == [] and i.get_check_constraints("SaPairs") == []
    return sorted(md.tables)


with engine.connect() as c:
    reflected = reflect_everything(c)
with Session(engine) as s:
    s.add_all([Item(id=1, name="a"), Item(id=2, name=None), Item(id=3, name="c")])
    s.commit()
    got = [(i.id, i.name) for i in s.scalars(sa.select(Item).where(Item.id >= 2).order_by(Item.id))]
    assert got == [(2, None), (3, "c")], got

# The ORM's error path: a session that fails part way and rolls back
# leaves nothing of its work, and sees its own flushed rows before that.
with Session(engine) as s:
    s.add_all([Item(id=50, name="x"), Item(id=51, name="y")])
    s.flush()
    assert s.scalar(sa.select(sa.func.count()).select_from(Item).where(Item.id >= 50)) == 2
    s.get(Item, 1).name = "changed"
    s.delete(s.get(Item, 3))
    s.flush()
    try:
        s.execute(sa.text("SELECT 1 / 0"))
        raise AssertionError("division by zero passed")
    except sa.exc.DBAPIError as e:
        assert e.orig.pgcode == "22012", e.orig.pgcode
    s.rollback()
with Session(engine) as s:
    got = [(i.id, i.name) for i in s.scalars(sa.select(Item).order_by(Item.id))]
    assert got == [(1, "a"), (2, None), (3, "c")], got

# The PostgreSQL dialect's upsert, as applications write it: ON CONFLICT
# on the primary key, every other column from EXCLUDED.
from sqlalchemy.dialects.postgresql import insert as pg_insert

upsert = pg_insert(Item.__table__).values([{"id": 3, "name": "c2"}, {"id": 4, "name": "d"}])
upsert = upsert.on_conflict_do_update(index_elements=["id"], set_={"name": upsert.excluded.name})
with engine.begin() as c:
    c.execute(upsert)
with Session(engine) as s:
    got = [(i.id, i.name) for i in s.scalars(sa.select(Item).where(Item.id >= 3).order_by(Item.id))]
    assert got == [(3, "c2"), (4, "d")], got
    # Only part of the row from EXCLUDED would keep the rest of the old
    # row, which a keyed table's INSERT does not: refused, 0A000.
    partial = pg_insert(Item.__table__).values(id=3, name="x")
    partial = partial.on_conflict_do_update(index_elements=["id"], set_={"name": sa.literal("fixed")})
    try:
        s.execute(partial)
        raise AssertionError("a partial DO UPDATE passed")
    except sa.exc.DBAPIError as e:
        assert e.orig.pgcode == "0A000", e.orig.pgcode
    s.rollback()


# Isolation levels as SQLAlchemy sets them: REPEATABLE READ reads one
# snapshot; a concurrent update of the same key fails the commit (40001).
rr = engine.execution_options(isolation_level="REPEATABLE READ")
with Session(rr) as s, Session(engine) as other:
    assert s.scalar(sa.text("SHOW transaction_isolation")) == "repeatable read"
    before = s.get(Item, 1).name
    other.get(Item, 1).name = "theirs"
    other.commit()
    s.expire_all()
    assert s.get(Item, 1).name == before
    s.get(Item, 1).name = "mine"
    try:
        s.commit()
        raise AssertionError("a stale update committed")
    except sa.exc.OperationalError as e:
        assert e.orig.pgcode == "40001", e.orig.pgcode
        s.rollback()
with engine.connect() as c:
    assert c.scalar(sa.select(Item.name).where(Item.id == 1)) == "theirs"
    c.execute(sa.text("UPDATE sa_items SET name = 'a' WHERE id = 1"))
    c.commit()
with engine.connect().execution_options(postgresql_readonly=True) as c:
    try:
        c.execute(sa.text("INSERT INTO sa_items VALUES (99, 'ro')"))
        raise AssertionError("a write in a read-only transaction")
    except sa.exc.InternalError as e:
        assert e.orig.pgcode == "25006", e.orig.pgcode
    c.rollback()


# SQLAlchemy over psycopg 3: on connect the dialect looks up types inside
# a savepoint; then Core with bound parameters, past psycopg's
# server-side prepare threshold.
engine3 = sa.create_engine(f"postgresql+psycopg://sa@127.0.0.1:{PORT}/sluice")
with engine3.connect() as c:
    c.execute(sa.text("INSERT INTO sa_items VALUES (:id, :name)"), [{"id": 10 + i, "name": "p3"} for i in range(5)])
    c.commit()
    for _ in range(8):
        n = c.execute(sa.text("SELECT count(*) FROM sa_items WHERE name = :n"), {"n": "p3"}).scalar()
    assert n == 5, n
    assert [x["name"] for x in sa.inspect(c).get_columns("sa_items")] == ["id", "name"]
    assert reflect_everything(c) == reflected


# SQLAlchemy over asyncpg.
async def with_asyncpg():
    engine = create_async_engine(f"postgresql+asyncpg://sa@127.0.0.1:{PORT}/sluice")
    async with engine.connect() as c:
        r = await c.execute(sa.text("SELECT count(*) FROM sa_events WHERE id >= :lo"), {"lo": 100})
        assert r.scalar() == 2
        assert await c.run_sync(reflect_everything) == reflected
    await engine.dispose()


asyncio.run(with_asyncpg())
print("sqlalchemy scenario ok")
