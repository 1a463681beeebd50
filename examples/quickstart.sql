-- weir quickstart: bids from a CSV file, counted per auction in 10-second tumbling windows.
-- Run: cargo run --release -- -f examples/quickstart.sql

CREATE TABLE bids (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  date_time TIMESTAMP,
  -- rows may arrive up to 4 seconds out of order; later ones are late and dropped (and counted)
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'file', path = 'examples/data/bids.csv', format = 'csv', header = 'true');

-- Each window is printed once, when the watermark passes its end.
SELECT window_start, window_end, auction, count(*) AS bids, max(price) AS top_price
FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
GROUP BY window_start, window_end, auction
HAVING count(*) >= 3;
