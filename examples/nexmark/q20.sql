-- Nexmark q20: expanded bids. Each bid with its auction's details, for auctions in category
-- 10: a regular join (no window) of bids and auctions. An inner join of append-only streams:
-- its result is append-only, each pair emitted once, when its second row arrives.

CREATE TABLE auction (
  id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT,
  date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000');

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT
  auction, bidder, price, channel, url, B.date_time AS bid_date_time, B.extra AS bid_extra,
  item_name, description, initial_bid, reserve, A.date_time, expires, seller, category,
  A.extra
FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
WHERE A.category = 10;
