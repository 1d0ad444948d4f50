"""ADBC (adbc-driver-postgresql) against Sluice: a query's and a view's
rows straight into Arrow tables (the driver reads them by binary COPY),
and parameters. Exits non-zero on a failure. (adbc_ingest is not
supported yet: the driver reads the target's columns with a regclass
cast.)"""
import sys

import adbc_driver_postgresql.dbapi as dbapi

PORT = int(sys.argv[1])

with dbapi.connect(f"postgresql://adbc@127.0.0.1:{PORT}/sluice") as conn:
    conn.autocommit = True
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
print("adbc scenario ok")
