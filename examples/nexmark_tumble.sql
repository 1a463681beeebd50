-- Nexmark bids from the built-in generator (100,000 events), as in Flink's Nexmark q7 shape:
-- the highest price per 10-second window, and how many bids it saw.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '100000');

SELECT window_start, window_end, count(*) AS bids, max(price) AS top_price
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECONDS))
GROUP BY window_start, window_end;
