"""psycopg 3 and psycopg2 against `weir serve`.

Usage: wire_clients.py PORT DIR, where DIR (the server's file root) holds events.csv and
reference.csv as written by the Rust wire tests (reference.csv adds each row's prior
watermark). The expected window results are computed here, in plain Python, from
reference.csv: an engine independent of weir.
"""

import collections
import csv
import datetime
import decimal
import sys

import psycopg
import psycopg2
import psycopg2.errors

PORT, DIR = int(sys.argv[1]), sys.argv[2]
DSN = f"host=127.0.0.1 port={PORT} user=weir dbname=weir"

CREATE = (
    "CREATE TABLE IF NOT EXISTS events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP, "
    "WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) "
    "WITH (connector = 'file', path = 'events.csv', format = 'csv', header = 'true')"
)
WINDOWS = (
    "SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total "
    "FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k"
)


def expected_windows():
    """TUMBLE 10 s count and sum by key over rows that are not late."""
    fmt = "%Y-%m-%d %H:%M:%S.%f"
    acc = collections.defaultdict(lambda: [0, 0])
    with open(f"{DIR}/reference.csv") as f:
        for row in csv.DictReader(f):
            ts = datetime.datetime.strptime(row["ts"], fmt)
            wprev = datetime.datetime.strptime(row["wprev"], fmt)
            epoch = int((ts - datetime.datetime(1970, 1, 1)).total_seconds() // 10 * 10)
            start = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=epoch)
            end = start + datetime.timedelta(seconds=10)
            if end <= wprev:
                continue  # late: its window had fired
            a = acc[(start, end, row["k"])]
            a[0] += 1
            a[1] += int(row["v"])
    return sorted((s, e, k, n, t) for (s, e, k), (n, t) in acc.items())


def check(name, got, want):
    if got != want:
        print(f"FAIL {name}:\n got  {got[:5]}... ({len(got)} rows)\n want {want[:5]}... ({len(want)} rows)")
        sys.exit(1)
    print(f"ok   {name} ({len(got)} rows)")


def psycopg3(want):
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(CREATE)
        # Text results, server-side parameter binding (extended protocol).
        rows = conn.execute(WINDOWS).fetchall()
        check("psycopg3 text", sorted(tuple(r) for r in rows), want)
        with conn.cursor(binary=True) as cur:
            cur.execute(WINDOWS)
            check("psycopg3 binary", sorted(tuple(r) for r in cur.fetchall()), want)
        for key in ["k0", "k5"]:
            rows = conn.execute(f"SELECT * FROM ({WINDOWS}) WHERE k = %s AND n >= %s", (key, 2)).fetchall()
            check(f"psycopg3 parameters {key}", sorted(tuple(r) for r in rows),
                  [w for w in want if w[2] == key and w[3] >= 2])
        rows = conn.execute("SELECT %s::BIGINT + 1, %s, %s::DOUBLE", (41, "it's", 0.5)).fetchall()
        check("psycopg3 literals", rows, [(42, "it's", 0.5)])
        try:
            conn.execute("SELECT * FROM nope")
            print("FAIL psycopg3: no error for a missing table")
            sys.exit(1)
        except psycopg.errors.UndefinedTable as e:
            print(f"ok   psycopg3 UndefinedTable: {e}".strip())
        # The session still works after the error.
        check("psycopg3 after error", conn.execute("SELECT 1").fetchall(), [(1,)])
    # Default (non-autocommit) connections wrap statements in BEGIN / COMMIT.
    with psycopg.connect(DSN) as conn:
        check("psycopg3 in a transaction", [conn.execute("SELECT count(*) FROM events").fetchone()[0] > 0], [True])
        conn.commit()


def psycopg2_client(want):
    conn = psycopg2.connect(DSN)
    cur = conn.cursor()
    cur.execute(WINDOWS)
    check("psycopg2", sorted(tuple(r) for r in cur.fetchall()), want)
    cur.execute(f"SELECT * FROM ({WINDOWS}) WHERE k = %s", ("k3",))
    check("psycopg2 parameters", sorted(tuple(r) for r in cur.fetchall()), [w for w in want if w[2] == "k3"])
    cur.execute("SELECT avg(v) FROM events WHERE k = %(k)s", {"k": "k1"})
    got = cur.fetchone()[0]
    vals = [int(r["v"]) for r in csv.DictReader(open(f"{DIR}/events.csv")) if r["k"] == "k1"]
    check("psycopg2 float", [round(float(got), 9)], [round(sum(vals) / len(vals), 9)])
    try:
        cur.execute("SELECT nope FROM events")
        print("FAIL psycopg2: no error for a missing column")
        sys.exit(1)
    except psycopg2.errors.UndefinedColumn as e:
        print(f"ok   psycopg2 UndefinedColumn: {str(e).strip()}")
        conn.rollback()
    cur.execute("SELECT 1")
    check("psycopg2 after error", cur.fetchall(), [(1,)])
    conn.commit()
    conn.close()


if __name__ == "__main__":
    want = expected_windows()
    assert want, "no windows expected: empty input?"
    psycopg3(want)
    psycopg2_client(want)
    print("all ok")
