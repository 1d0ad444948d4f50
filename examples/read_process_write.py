#!/usr/bin/env python3
"""Read-process-write inside Sluice, exactly once, with no external store.

A worker reads the `usage` table through a subscription, writes one row of
totals per batch into the table `billing_batches`, and commits that row
together with the subscription's new offsets in one transaction. If the
worker or the server dies anywhere, the batch was either committed with its
offsets or not at all: no usage row is counted twice or missed.

    python3 examples/read_process_write.py \
        --dsn 'host=127.0.0.1 port=5455 user=worker dbname=sluice'

It creates what it needs when missing:

    CREATE TABLE billing_batches (first_partition INT, first_offset BIGINT,
        events BIGINT, tokens BIGINT) APPEND ONLY;
    CREATE SUBSCRIPTION billing_worker FROM usage;

and expects `usage` to have a `tokens BIGINT` column. Afterwards
`SELECT sum(events), sum(tokens) FROM billing_batches` equals
`SELECT count(*), sum(tokens) FROM usage` for every row the worker read.
"""

import argparse

import psycopg


def setup(dsn, subscription):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS billing_batches (first_partition INT, "
            "first_offset BIGINT, events BIGINT, tokens BIGINT) APPEND ONLY"
        )
        exists = conn.execute(
            "SELECT count(*) FROM sluice_catalog.subscriptions WHERE subscription_name = %s",
            (subscription,),
        ).fetchone()[0]
        if not exists:
            conn.execute(f"CREATE SUBSCRIPTION {subscription} FROM usage")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", default="host=127.0.0.1 port=5455 user=worker dbname=sluice")
    ap.add_argument("--subscription", default="billing_worker")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument(
        "--drain",
        action="store_true",
        help="exit once a FETCH finds nothing new within its timeout",
    )
    args = ap.parse_args()
    setup(args.dsn, args.subscription)

    # Not autocommit: psycopg opens a transaction block at the first
    # statement, and `conn.transaction()` commits it (or rolls it back on
    # an exception).
    with psycopg.connect(args.dsn) as conn:
        while True:
            with conn.transaction():
                # A cursor declared in a block closes with it; the group's
                # committed offsets say where the next one starts.
                conn.execute(f"DECLARE c SUBSCRIPTION CURSOR FOR {args.subscription}")
                cur = conn.execute(f"FETCH {args.batch} FROM c WITH (timeout = '1s')")
                names = [d.name for d in cur.description]
                t, p, o = names.index("tokens"), names.index("_partition"), names.index("_offset")
                rows = cur.fetchall()
                if rows:
                    tokens = sum(r[t] for r in rows)
                    first = min(rows, key=lambda r: (r[p], r[o]))
                    # The totals and the offsets FETCH moved commit together.
                    conn.execute(
                        "INSERT INTO billing_batches VALUES (%s, %s, %s, %s)",
                        (first[p], first[o], len(rows), tokens),
                    )
            if not rows and args.drain:
                return


if __name__ == "__main__":
    main()
