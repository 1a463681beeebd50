-- Sliding (HOP) windows: every 5 seconds, the last 20 seconds of bids per auction.
-- HOP(table, time_column, slide, size), slide first, as in Flink and RisingWave.

CREATE TABLE bids (
  auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'file', path = 'examples/data/bids.csv', format = 'csv', header = 'true');

SELECT window_start, window_end, auction,
       count(*) AS bids, count(DISTINCT bidder) AS bidders, avg(price) AS avg_price
FROM HOP(bids, date_time, INTERVAL '5' SECOND, INTERVAL '20' SECOND)
GROUP BY window_start, window_end, auction
ORDER BY window_start, auction;
