"""Reads every row through a cursor with asyncpg, which asks for binary
results: `python3 benches/fetch_binary.py PORT USER DECLARE` prints the
rows read and the seconds taken. DECLARE is the statement that opens
cursor c (a subscription cursor in Sluice, a SQL cursor in PostgreSQL,
inside a transaction)."""
import asyncio
import sys
import time

import asyncpg


async def main(port, user, declare):
    conn = await asyncpg.connect(host="127.0.0.1", port=int(port), user=user, database=user)
    tx = conn.transaction()
    await tx.start()
    await conn.execute(declare)
    fetch = await conn.prepare("FETCH 10000 FROM c")
    rows = 0
    started = time.perf_counter()
    while True:
        batch = await fetch.fetch()
        if not batch:
            break
        rows += len(batch)
    took = time.perf_counter() - started
    await tx.commit()
    await conn.close()
    print(rows, f"{took:.3f}")


asyncio.run(main(*sys.argv[1:4]))
