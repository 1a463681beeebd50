-- Nexmark q7: highest bid. The bids carrying the highest price of their 10-second window:
-- the windowed bids joined with their own windowed maximum on the same windows. (Flink writes
-- this as an interval join on date_time BETWEEN window_end - 10 s AND window_end; the window
-- join states the intent, "the top bids of each window", without the closed upper bound.)

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) AS B
JOIN (
  SELECT max(price) AS maxprice, window_start, window_end
  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
  GROUP BY window_start, window_end
) AS B1
ON B.window_start = B1.window_start
  AND B.window_end = B1.window_end
  AND B.price = B1.maxprice;
