-- Nexmark q17: auction statistics per day, Flink's form (DATE_FORMAT as to_char): per auction
-- and day, bid counts in three price ranks, and min, max, avg and sum of the price. An
-- updating query over an unbounded stream; the final result over this bounded one.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT
  auction,
  to_char(date_time, '%Y-%m-%d') AS day,
  count(*) AS total_bids,
  count(*) FILTER (WHERE price < 10000) AS rank1_bids,
  count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
  count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
  min(price) AS min_price,
  max(price) AS max_price,
  avg(price) AS avg_price,
  sum(price) AS sum_price
FROM bid
GROUP BY auction, to_char(date_time, '%Y-%m-%d');
