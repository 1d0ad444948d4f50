"""A heavy query cancelled by each Python driver's own cancel: psycopg 3's
cancel() (the classic CancelRequest) and cancel_safe() (libpq 17's cancel
protocol, after an SSLRequest answered 'N'), and asyncpg's task
cancellation. Each must end with 57014 within 200 ms of the request, and
the connection must answer again.

Usage: cancel_scenario.py PORT
"""
import asyncio
import sys
import threading
import time

import asyncpg
import psycopg

PORT = int(sys.argv[1])
HEAVY = ("SELECT count(*) FROM generate_series(1, 150000) a(x), "
         "generate_series(1, 150000) b(x) WHERE a.x + b.x = 1")
LIMIT = 0.2


def psycopg_cancel(how):
    c = psycopg.connect(f"host=127.0.0.1 port={PORT} user=cancel dbname=sluice",
                        autocommit=True)
    ended = {}

    def run():
        try:
            c.execute(HEAVY)
        except psycopg.Error as e:
            ended["state"] = e.sqlstate
            ended["at"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    asked = time.monotonic()
    if how == "cancel":
        c.cancel()
    else:
        c.cancel_safe(timeout=5)
    t.join(10)
    assert ended.get("state") == "57014", f"psycopg {how}: {ended}"
    took = ended["at"] - asked
    assert took < LIMIT, f"psycopg {how} took {took:.3f} s"
    assert c.execute("SELECT 1").fetchone()[0] == 1
    print(f"psycopg {how}: 57014 after {took * 1000:.1f} ms")
    c.close()


async def asyncpg_cancel():
    c = await asyncpg.connect(host="127.0.0.1", port=PORT, user="cancel",
                              database="sluice")
    task = asyncio.ensure_future(c.fetch(HEAVY))
    await asyncio.sleep(0.5)
    asked = time.monotonic()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    # asyncpg sends a CancelRequest and waits until the server has ended
    # the query before the connection takes another.
    assert await c.fetchval("SELECT 1") == 1
    took = time.monotonic() - asked
    assert took < LIMIT, f"asyncpg cancel took {took:.3f} s"
    print(f"asyncpg cancel: settled after {took * 1000:.1f} ms")
    await c.close()


psycopg_cancel("cancel")
if psycopg.pq.version() >= 170000:
    psycopg_cancel("cancel_safe")
else:
    print(f"libpq {psycopg.pq.version()} has no cancel_safe; skipped")
asyncio.run(asyncpg_cancel())
