-- Nexmark q18: the last bid of each bidder on each auction: deduplication keeping the last
-- row, a Top-1 per (bidder, auction) by time without windows. Over an unbounded stream each
-- newer bid replaces the one before it (-U/+U); over this bounded one, the final last bids.
-- Equal times are broken by the rest of the row, so every run keeps the same row.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT auction, bidder, price, channel, url, date_time, extra
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC)
    AS rank_number
  FROM bid
)
WHERE rank_number <= 1;
