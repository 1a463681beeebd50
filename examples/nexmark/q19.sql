-- Nexmark q19: the ten highest bids of each auction, with their rank: a Top-N per auction
-- without windows. Over an unbounded stream ranks change as higher bids arrive (each
-- changed rank as -U/+U); over this bounded one, the final top ten. Equal prices are broken
-- by the rest of the row (ascending), so every run ranks alike.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
  FROM bid
)
WHERE rank_number <= 10;
