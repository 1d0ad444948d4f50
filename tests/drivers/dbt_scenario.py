"""dbt (dbt-postgres) against Sluice, as a user runs a project: a `view`,
a `table` and a `materialized_view` model over a source table, `dbt run`
twice (the second run replaces the view and the table through renames and
refreshes the materialized view), `dbt test`, and `dbt docs generate`,
whose catalog must describe every model's columns. The project is in
`dbt_project/` beside this file.

Usage: dbt_scenario.py PORT DBT. Exits non-zero on a failure."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import psycopg

PORT = sys.argv[1]
DBT = sys.argv[2]
DSN = f"host=127.0.0.1 port={PORT} user=sluice dbname=sluice"
HERE = os.path.dirname(os.path.abspath(__file__))

with psycopg.connect(DSN, autocommit=True) as pg:
    pg.execute("CREATE TABLE requests (id BIGINT, user_id TEXT, latency_ms BIGINT)")
    pg.execute("INSERT INTO requests VALUES (1, 'u1', 10), (2, 'u2', 20), (3, 'u1', NULL)")

project = os.path.join(tempfile.mkdtemp(), "project")
shutil.copytree(os.path.join(HERE, "dbt_project"), project)
env = dict(os.environ, SLUICE_PORT=PORT, DBT_SEND_ANONYMOUS_USAGE_STATS="false")


def dbt(*args):
    out = subprocess.run(
        [DBT, *args, "--profiles-dir", project, "--project-dir", project],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, f"dbt {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


first = dbt("run")
assert "PASS=3" in first, first
with psycopg.connect(DSN, autocommit=True) as pg:
    pg.execute("INSERT INTO requests VALUES (4, 'u3', 40)")
second = dbt("run")
assert "PASS=3" in second and "REFRESH MATERIALIZED VIEW" in second, second
tests = dbt("test")
assert "PASS=4" in tests, tests
dbt("docs", "generate")

with psycopg.connect(DSN, autocommit=True) as pg:
    assert pg.execute("SELECT id, user_id, doubled FROM request_table ORDER BY id").fetchall() == [
        (1, "u1", 20), (2, "u2", 40), (4, "u3", 80)]
    assert pg.execute("SELECT id FROM request_view ORDER BY id").fetchall() == [(1,), (2,), (4,)]
    assert pg.execute("SELECT user_id, requests, total_ms FROM per_user ORDER BY user_id").fetchall() == [
        ("u1", 2, 10), ("u2", 1, 20), ("u3", 1, 40)]
    kinds = dict(pg.execute(
        "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public'").fetchall())
    assert kinds.get("request_view") == "v" and kinds.get("request_table") == "r" \
        and kinds.get("per_user") == "m", kinds
    # No backup or temporary relation is left behind.
    assert not [k for k in kinds if "__dbt" in k], kinds

catalog = json.load(open(os.path.join(project, "target", "catalog.json")))
columns = {k.split(".")[-1]: (v["metadata"]["type"], list(v["columns"]))
           for k, v in catalog["nodes"].items()}
assert columns == {
    "request_view": ("VIEW", ["id", "user_id", "latency_ms"]),
    "request_table": ("BASE TABLE", ["id", "user_id", "doubled"]),
    "per_user": ("MATERIALIZED VIEW", ["user_id", "requests", "total_ms"]),
}, columns
print("dbt ok")
