"""DataFrame tools against Sluice: polars through connectorx (which reads
with `COPY (...) TO STDOUT WITH BINARY`, in parallel partitions) and
pandas through SQLAlchemy (`to_sql` to create, replace and append a table
of floats, text, integers and timestamps, `read_sql` back).

Usage: dataframes_scenario.py PORT. Exits non-zero on a failure."""
import datetime
import sys

import pandas as pd
import polars as pl
import psycopg
import sqlalchemy as sa

PORT = sys.argv[1]
URI = f"postgresql://sluice@127.0.0.1:{PORT}/sluice"
with psycopg.connect(f"host=127.0.0.1 port={PORT} user=sluice dbname=sluice", autocommit=True) as pg:
    pg.execute("CREATE TABLE req (id BIGINT, user_id TEXT, latency DOUBLE PRECISION, "
               "amount NUMERIC(12,3), at TIMESTAMP) WITH (partitions = 3)")
    pg.execute("INSERT INTO req SELECT x, 'u' || (x % 7), x * 0.5, x, "
               "TIMESTAMP '2026-01-01' + x * INTERVAL '1 minute' FROM generate_series(1, 1000) x")
    pg.execute("CREATE MATERIALIZED VIEW req_users AS SELECT user_id, count(*) AS n FROM req GROUP BY user_id")
    pg.execute("FLUSH")

# polars: one query, an ordered read with a limit, and partitioned reads.
df = pl.read_database_uri("SELECT id, user_id, latency, amount, at FROM req WHERE id <= 3 ORDER BY id", URI,
                          engine="connectorx")
assert df["id"].to_list() == [1, 2, 3], df
assert df["latency"].to_list() == [0.5, 1.0, 1.5], df
assert df["at"][0] == datetime.datetime(2026, 1, 1, 0, 1), df
top = pl.read_database_uri("SELECT id FROM req ORDER BY id DESC LIMIT 2", URI, engine="connectorx")
assert top["id"].to_list() == [1000, 999], top
parts = pl.read_database_uri(["SELECT id FROM req WHERE id <= 500", "SELECT id FROM req WHERE id > 500"], URI,
                             engine="connectorx")
assert sorted(parts["id"].to_list()) == list(range(1, 1001)), parts.shape
users = pl.read_database_uri("SELECT * FROM req_users", URI, engine="connectorx")
assert sorted(users["n"].to_list()) == sorted([143] * 6 + [142]), users

# pandas: to_sql without the index column, replaced, appended, read back.
engine = sa.create_engine(f"postgresql+psycopg2://sluice@127.0.0.1:{PORT}/sluice")
frame = pd.DataFrame({
    "score": [1.5, 2.5], "label": ["x", "y"], "n": [1, 2],
    "seen": [datetime.datetime(2026, 1, 1), datetime.datetime(2026, 1, 2)],
})
frame.to_sql("scores", engine, index=False)
frame.to_sql("scores", engine, index=False, if_exists="replace")
frame.to_sql("scores", engine, index=False, if_exists="append")
back = pd.read_sql("SELECT * FROM scores ORDER BY n, label", engine)
assert back["score"].tolist() == [1.5, 1.5, 2.5, 2.5], back
assert str(back["seen"].dtype).startswith("datetime64"), back.dtypes
assert pd.read_sql("SELECT count(*) AS c FROM req WHERE id > %(low)s", engine, params={"low": 990})["c"][0] == 10
# pandas' default keeps the frame's index as a column and indexes it
# (CREATE INDEX ix_<table>_index), in the same transaction as the table.
indexed = pd.DataFrame({"v": [10, 20, 30]}, index=[7, 8, 9])
indexed.to_sql("indexed", engine)
indexed.to_sql("indexed", engine, if_exists="replace")
indexed.to_sql("indexed", engine, if_exists="append")
again = pd.read_sql("SELECT * FROM indexed WHERE index = %(i)s", engine, params={"i": 8}, index_col="index")
assert again["v"].tolist() == [20, 20], again
found = sa.inspect(engine).get_indexes("indexed")
assert [(i["name"], i["column_names"], i["unique"]) for i in found] == [("ix_indexed_index", ["index"], False)], found
assert set(sa.inspect(engine).get_table_names()) >= {"req", "scores", "indexed"}
assert "req_users" in sa.inspect(engine).get_materialized_view_names()
print("dataframes ok")
