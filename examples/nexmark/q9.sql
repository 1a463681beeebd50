-- Nexmark q9: winning bids. For each auction, its highest bid placed while it was open
-- (the earliest of equal bids): a join of auctions and bids, then a Top-1 per auction
-- without windows. As in q4, the watermarks make the join an interval join whose auctions
-- reach to their `expires` (held only while bids can still meet them). Over an unbounded
-- stream the winner is replaced (-U/+U) as higher bids arrive; over this bounded one, the
-- final winners.

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

SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller,
  category, extra, auction, bidder, price, bid_date_time, bid_extra
FROM (
  SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
    B.extra AS bid_extra,
    ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
)
WHERE rownum <= 1;
