-- Nexmark q4: average closing price per category. The winning (highest) bid of each auction
-- among the bids placed while it was open, then the average of those per category: a join
-- of auctions and bids, and two aggregations, the second over the first's updating result.
-- Both tables have watermarks, so the join is an interval join whose auctions reach to their
-- `expires`: an auction is kept until the bids' watermark passes its expiry, a bid until the
-- auctions' watermark passes its time (without watermarks it is a regular join keeping every
-- row, as Flink runs q4). Over an unbounded stream every level updates as bids arrive; over
-- this bounded one, the final result.

CREATE TABLE auction (
  id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT,
  date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000');

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT Q.category, AVG(Q.final) AS avg_final
FROM (
  SELECT MAX(B.price) AS final, A.category
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
  GROUP BY A.id, A.category
) Q
GROUP BY Q.category;
