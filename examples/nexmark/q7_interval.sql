-- Nexmark q7: highest bid, as Flink writes it: each bid joined with the maximum price of the
-- 10-second windows by an interval join, the bid's time between the window's end minus 10 s
-- and its end (both bounds included, so a bid exactly at a window's end also meets the
-- window before it). The window-join form is q7.sql.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end AS date_time
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time;
