-- Story: a fraud velocity check. A card charged five times or more within two minutes is
-- suspicious (stolen card numbers are tested with bursts of small online charges). The
-- alerts go to a PostgreSQL table the fraud team's tools read, exactly once, even if weir is
-- killed and resumed (checkpoints every half second; `weir resume` continues).
--
--   weir --data-dir /tmp/weir-fraud -f examples/stories/fraud_velocity.sql
--
-- Needs a PostgreSQL server with max_prepared_transactions > 0 (two-phase commit); change the
-- url to yours. tests/tests/stories.rs runs it against a real server and checks the table
-- against the windows computed by hand from examples/data/card_transactions.csv.

CREATE TABLE transactions (
  card VARCHAR, merchant VARCHAR, amount DOUBLE, ts TIMESTAMP,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (connector = 'file', path = 'examples/data/card_transactions.csv', format = 'csv',
        header = 'true');

SET checkpoint_interval = '500ms';

-- Two-minute windows every 30 seconds: a burst is caught whichever way it straddles a
-- window boundary.
CREATE SINK velocity_alerts WITH (
  connector = 'postgres', url = 'postgresql://postgres@127.0.0.1:5432/postgres',
  table = 'velocity_alerts', create_table = 'true'
) AS
SELECT card, window_start, window_end, count(*) AS charges, sum(amount) AS total
FROM HOP(transactions, ts, INTERVAL '30' SECOND, INTERVAL '2' MINUTE)
GROUP BY card, window_start, window_end
HAVING count(*) >= 5;
