#!/usr/bin/env python3
"""Billing consumer: per-tenant token totals in PostgreSQL, exactly once.

Reads the `usage` table of a Sluice server through a subscription cursor and
writes, in one PostgreSQL transaction per batch, the new per-tenant totals
and the next offset of every partition it has read. On start it reads those
offsets back from PostgreSQL and declares its cursor there. PostgreSQL's
offsets are the truth: if the consumer dies anywhere, the batch it was
working on was either committed together with its offsets or not at all,
so no row is lost or counted twice.

    python3 examples/billing_consumer.py \
        --sluice 'host=127.0.0.1 port=5455 user=billing dbname=sluice' \
        --postgres 'host=127.0.0.1 port=5432 user=postgres dbname=postgres'

The Sluice side needs the table and a subscription:

    CREATE TABLE usage (tenant TEXT, tokens BIGINT) APPEND ONLY
        WITH (partitions = 4, partition_key = 'tenant');
    CREATE SUBSCRIPTION billing FROM usage;
"""

import argparse

import psycopg

SCHEMA = """
CREATE TABLE IF NOT EXISTS billing_totals (
    tenant TEXT PRIMARY KEY,
    tokens BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS billing_offsets (
    subscription TEXT NOT NULL,
    partition INT NOT NULL,
    next_offset BIGINT NOT NULL,
    PRIMARY KEY (subscription, partition)
);
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", default="host=127.0.0.1 port=5455 user=billing dbname=sluice")
    ap.add_argument("--postgres", required=True)
    ap.add_argument("--subscription", default="billing")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument(
        "--drain",
        action="store_true",
        help="exit once a FETCH finds nothing new within its timeout",
    )
    args = ap.parse_args()

    with psycopg.connect(args.postgres) as pg, psycopg.connect(args.sluice, autocommit=True) as sluice:
        with pg.transaction():
            pg.execute(SCHEMA)
            offsets = pg.execute(
                "SELECT partition, next_offset FROM billing_offsets WHERE subscription = %s ORDER BY partition",
                (args.subscription,),
            ).fetchall()
        # Start exactly where PostgreSQL says; partitions never read start
        # at the earliest retained offset.
        if offsets:
            since = "SINCE OFFSETS (" + ", ".join(f"{p} => {o}" for p, o in offsets) + ")"
        else:
            since = "SINCE EARLIEST"
        sluice.execute(f"DECLARE c SUBSCRIPTION CURSOR FOR {args.subscription} {since}")

        while True:
            rows = sluice.execute(f"FETCH {args.batch} FROM c WITH (timeout = '1s')").fetchall()
            if not rows:
                if args.drain:
                    return
                continue
            totals = {}
            next_offsets = {}
            for tenant, tokens, partition, offset in rows:
                totals[tenant] = totals.get(tenant, 0) + tokens
                next_offsets[partition] = max(next_offsets.get(partition, 0), offset + 1)
            # Totals and offsets in one transaction: both or neither.
            with pg.transaction():
                with pg.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO billing_totals (tenant, tokens) VALUES (%s, %s) "
                        "ON CONFLICT (tenant) DO UPDATE SET tokens = billing_totals.tokens + EXCLUDED.tokens",
                        list(totals.items()),
                    )
                    cur.executemany(
                        "INSERT INTO billing_offsets (subscription, partition, next_offset) VALUES (%s, %s, %s) "
                        "ON CONFLICT (subscription, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
                        [(args.subscription, p, o) for p, o in next_offsets.items()],
                    )


if __name__ == "__main__":
    main()
