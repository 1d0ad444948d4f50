"""Writes N rows of the usage schema as CSV: event_id, tenant, tokens, event_time.

Arguments: N, the output file, and optionally how many tenants (50).
"""
import sys
import random
import datetime

n = int(sys.argv[1])
out = open(sys.argv[2], "w", buffering=1 << 20)
rng = random.Random(42)
start = datetime.datetime(2026, 1, 1)
tenant_count = int(sys.argv[3]) if len(sys.argv) > 3 else 50
tenants = [f"tenant-{i:02d}" for i in range(tenant_count)]
lines = []
for i in range(n):
    # Event times advance 1 ms per event, jittered up to 5 s out of order.
    t = start + datetime.timedelta(milliseconds=i - rng.randrange(5000))
    lines.append(f"evt-{i:09d},{tenants[rng.randrange(tenant_count)]},{rng.randrange(50, 4000)},{t:%Y-%m-%d %H:%M:%S.%f}\n")
    if len(lines) == 100_000:
        out.write("".join(lines))
        lines.clear()
out.write("".join(lines))
out.close()
