"""ADBC (adbc-driver-postgresql) against Sluice: a query's and a view's
rows straight into Arrow tables (the driver reads them by binary COPY),
parameters, and Arrow tables written with adbc_ingest (binary COPY in,
into an existing table or one it creates). Exits non-zero on a failure."""
import sys

import adbc_driver_postgresql.dbapi as dbapi
import pyarrow as pa

PORT = int(sys.argv[1])

URI = f"postgresql://adbc@127.0.0.1:{PORT}/sluice"

# autocommit is a connect() argument: without it the driver opens a
# transaction block (BEGIN TRANSACTION) and nothing is stored until commit.
with dbapi.connect(URI, autocommit=True) as conn:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE ad (id BIGINT NOT NULL, name TEXT, score DOUBLE PRECISION, at TIMESTAMP)")
        cur.execute("INSERT INTO ad VALUES (1, 'a', 1.5, '2026-01-01 10:00:00'), (2, NULL, NULL, NULL)")
        cur.execute("SELECT id, name, score, at FROM ad ORDER BY id")
        t = cur.fetch_arrow_table()
        assert t.num_rows == 2, t
        assert t.column("id").to_pylist() == [1, 2], t
        assert t.column("name").to_pylist() == ["a", None], t
        assert t.column("score").to_pylist() == [1.5, None], t
        cur.execute("SELECT name FROM ad WHERE id = $1", parameters=(1,))
        assert cur.fetchall() == [("a",)]
        # A view's rows as Arrow, as a notebook rebuilds a dataset.
        cur.execute("CREATE MATERIALIZED VIEW ad_named AS SELECT id, name FROM ad WHERE name IS NOT NULL")
        cur.execute("FLUSH")
        cur.execute("SELECT * FROM ad_named")
        assert cur.fetch_arrow_table().to_pylist() == [{"id": 1, "name": "a"}]
        # Arrow tables in: appended to an existing table (the driver looks
        # its columns up with a '"public" . "ad"'::regclass cast), and into
        # a table it creates.
        more = pa.table({
            "id": pa.array([3, 4], pa.int64()),
            "name": ["c", None],
            "score": pa.array([3.5, None], pa.float64()),
            "at": pa.array([None, None], pa.timestamp("us")),
        })
        assert cur.adbc_ingest("ad", more, mode="append") == 2
        cur.execute("SELECT id, name FROM ad ORDER BY id")
        assert cur.fetchall() == [(1, "a"), (2, None), (3, "c"), (4, None)]
        assert cur.adbc_ingest("ad_new", more, mode="create") == 2
        cur.execute("SELECT sum(id), count(score) FROM ad_new")
        assert cur.fetchall() == [(7, 1)]
        # A NULL id stores nothing of the batch.
        bad = pa.table({"id": pa.array([5, None], pa.int64()), "name": ["e", "f"],
                        "score": pa.array([1.0, 2.0]), "at": pa.array([None, None], pa.timestamp("us"))})
        try:
            cur.adbc_ingest("ad", bad, mode="append")
            raise AssertionError("NULL id accepted")
        except dbapi.Error as e:
            assert "23502" in str(e), e
        cur.execute("SELECT count(*) FROM ad")
        assert cur.fetchall() == [(4,)]

# A transaction block: the block reads its own rows, rollback discards them,
# commit stores them for everyone.
rows = pa.table({
    "id": pa.array([5, 6], pa.int64()),
    "name": ["e", "f"],
    "score": pa.array([5.0, 6.0]),
    "at": pa.array([None, None], pa.timestamp("us")),
})
with dbapi.connect(URI) as conn, dbapi.connect(URI, autocommit=True) as other:
    with conn.cursor() as cur, other.cursor() as out:
        assert cur.adbc_ingest("ad", rows, mode="append") == 2
        cur.execute("SELECT count(*) FROM ad")
        assert cur.fetchall() == [(6,)]
        out.execute("SELECT count(*) FROM ad")
        assert out.fetchall() == [(4,)]
        conn.rollback()
        out.execute("SELECT count(*) FROM ad")
        assert out.fetchall() == [(4,)]
        assert cur.adbc_ingest("ad", rows, mode="append") == 2
        conn.commit()
        out.execute("SELECT count(*) FROM ad")
        assert out.fetchall() == [(6,)]
print("adbc scenario ok")
