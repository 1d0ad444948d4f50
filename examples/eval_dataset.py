#!/usr/bin/env python3
"""Eval dataset: a request log turned into a split, versioned dataset that
can be rebuilt byte for byte.

Logs requests into a Sluice server, takes a cut of the log, defines a
dataset over it with a train/validation/test split by user, exports it to
Parquet (with its manifest beside it), reloads it in pandas, and verifies
it against the log. Then more requests arrive and a second version is
made: the first still verifies, and every user is in the same split in
both.

    python3 examples/eval_dataset.py \
        --sluice 'host=127.0.0.1 port=5455 user=sluice dbname=sluice' \
        --out /tmp/evals

The server writes the files, so `--out` is a directory on the server's
machine (or an s3:// prefix the server can write to).
"""

import argparse
import json
import os

import pandas as pd
import psycopg

SETUP = """
CREATE TABLE IF NOT EXISTS requests (
    request_id BIGINT, user_id TEXT, prompt TEXT, response TEXT, score INT
) APPEND ONLY WITH (partitions = 4, partition_key = 'user_id');
"""


def log_requests(conn, first, count):
    """Appends `count` requests from request id `first` on."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO requests VALUES (%s, %s, %s, %s, %s)",
            [
                (i, f"user_{i % 37}", f"question {i}", f"answer {i}", i % 5)
                for i in range(first, first + count)
            ],
        )


def export(conn, out, version, name=None):
    """Writes a version to Parquet; returns the rows, the manifest and the
    file's path."""
    path = os.path.join(out, name or f"evals_v{version}.parquet")
    conn.execute(
        f"COPY DATASET evals VERSION {version} TO '{path}' WITH (FORMAT parquet)"
    )
    with open(path + ".manifest.json") as f:
        manifest = json.load(f)
    return pd.read_parquet(path), manifest, path


def verify(conn, version):
    row = conn.execute(
        f"VERIFY DATASET evals VERSION {version}"
    ).fetchone()
    return row[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sluice", required=True, help="libpq connection string")
    parser.add_argument("--out", required=True, help="directory the server writes to")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    with psycopg.connect(args.sluice, autocommit=True) as conn:
        conn.execute(SETUP)
        log_requests(conn, 0, 2000)

        # A cut names exactly which requests the dataset holds.
        conn.execute("DROP DATASET IF EXISTS evals")
        conn.execute("DROP CUT IF EXISTS evals_base")
        conn.execute("CREATE CUT evals_base FOR requests")
        conn.execute(
            "CREATE DATASET evals AS "
            "SELECT request_id, user_id, prompt, response FROM requests WHERE score >= 2 "
            "AS OF CUT evals_base "
            "WITH (split = 'train 80, validation 10, test 10', split_key = 'user_id', seed = 7)"
        )
        # Requests logged after the cut are not in it.
        log_requests(conn, 2000, 500)

        first, manifest, path = export(conn, args.out, 1)
        again, _, again_path = export(conn, args.out, 1, "evals_v1_again.parquet")
        with open(path, "rb") as a, open(again_path, "rb") as b:
            identical = a.read() == b.read()
        print(f"version 1: {len(first)} rows, {manifest['rows_per_split']}")
        print(f"  content hash {manifest['content_hash']}")
        assert identical and first.equals(again), "one version, one file"
        assert manifest["rows"] == len(first)
        assert first["request_id"].max() < 2000, "the cut holds the first 2000 requests only"
        # Each user is in exactly one split.
        assert (first.groupby("user_id")["split"].nunique() == 1).all()
        assert verify(conn, 1), "version 1 computes again from the log"

        # A second version, with the requests logged since.
        conn.execute("REFRESH DATASET evals")
        second, manifest2, _ = export(conn, args.out, 2)
        print(f"version 2: {len(second)} rows, {manifest2['rows_per_split']}")
        assert len(second) > len(first)
        assert verify(conn, 1) and verify(conn, 2), "both versions verify"
        # Users keep their split as rows are added.
        was = first.groupby("user_id")["split"].first()
        now = second.groupby("user_id")["split"].first()
        assert (now[was.index] == was).all(), "a user stays in its split"
        print("verified: both versions rebuild from the log to the same content")


if __name__ == "__main__":
    main()
