#!/usr/bin/env python3
"""Writes examples/data/bids.csv: a small, deterministic bid stream for the quickstart.

Rows arrive mostly in event-time order, some up to 3 s out of order (within the table's 4 s
watermark bound), and a handful far behind it (late rows, dropped and counted by weir).
"""
import random
from datetime import datetime, timedelta

random.seed(7)
base = datetime(2026, 1, 1, 12, 0, 0)
rows = []
for i in range(600):
    t = base + timedelta(milliseconds=200 * i)
    if i % 7 == 3:
        t -= timedelta(milliseconds=random.randint(0, 3000))
    if i in (250, 420, 555):
        t -= timedelta(seconds=25)
    auction = random.choice([1001, 1002, 1003, 1004, 1005, 1006])
    bidder = random.randint(1, 40)
    price = random.randint(10, 500)
    rows.append((auction, bidder, price, t))
with open("examples/data/bids.csv", "w") as f:
    f.write("auction,bidder,price,date_time\n")
    for a, b, p, t in rows:
        ts = t.strftime("%Y-%m-%d %H:%M:%S")
        if t.microsecond:
            ts += ".%03d" % (t.microsecond // 1000)
        f.write(f"{a},{b},{p},{ts}\n")
