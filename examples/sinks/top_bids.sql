-- A sink job: the busiest auctions of every 10 seconds, written exactly once to CSV part
-- files under out/top_bids. Needs a data directory for its checkpoints:
--
--   weir --data-dir /tmp/weir-data -f examples/sinks/top_bids.sql
--
-- Kill it at any moment (kill -9 works) and run `weir resume --data-dir /tmp/weir-data`:
-- the files under out/top_bids end up with every result exactly once.

CREATE TABLE IF NOT EXISTS bids (
  auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'file', path = 'examples/data/bids.csv', format = 'csv', header = 'true',
        rate = '200');

SET checkpoint_interval = '200ms';

CREATE SINK top_bids WITH (connector = 'file', path = 'out/top_bids', format = 'csv',
                           header = 'true') AS
SELECT window_start, window_end, auction, count(*) AS bids, max(price) AS top_price
FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
GROUP BY window_start, window_end, auction;
