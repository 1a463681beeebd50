-- Nexmark q16: channel statistics per day, Flink's form (DATE_FORMAT as to_char): per
-- channel and day, the last minute seen, bid counts in three price ranks, and distinct
-- bidders and auctions in each. A GROUP BY without a window: updating over an unbounded
-- stream, the final result over this bounded one.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT
  channel,
  to_char(date_time, '%Y-%m-%d') AS day,
  max(to_char(date_time, '%H:%M')) AS minute,
  count(*) AS total_bids,
  count(*) FILTER (WHERE price < 10000) AS rank1_bids,
  count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
  count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
  count(DISTINCT bidder) AS total_bidders,
  count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
  count(DISTINCT auction) AS total_auctions,
  count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
FROM bid
GROUP BY channel, to_char(date_time, '%Y-%m-%d');
