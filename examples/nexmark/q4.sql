-- Nexmark q4: average closing price per category. The winning (highest) bid of each auction
-- among the bids placed while it was open, then the average of those per category: a
-- regular join of auctions and bids with a time filter, and two aggregations, the second
-- over the first's updating result. Over an unbounded stream every level updates as bids
-- arrive; over this bounded one, the final result.

CREATE TABLE auction (
  id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT,
  date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000');

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT Q.category, AVG(Q.final) AS avg_final
FROM (
  SELECT MAX(B.price) AS final, A.category
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
  GROUP BY A.id, A.category
) Q
GROUP BY Q.category;
