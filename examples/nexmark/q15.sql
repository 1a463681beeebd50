-- Nexmark q15: bidding statistics per day, Flink's form (DATE_FORMAT(dateTime, 'yyyy-MM-dd')
-- is DataFusion's to_char(date_time, '%Y-%m-%d')): counts of bids, bidders and auctions in
-- three price ranks, with FILTER and COUNT(DISTINCT). A GROUP BY without a window: over an
-- unbounded stream an updating query (each day's row changes as bids arrive, shown with an
-- op column); over this bounded one, the final result (or, with SET runtime_mode =
-- 'streaming', the changelog that ends in it).

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT
  to_char(date_time, '%Y-%m-%d') AS day,
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
GROUP BY to_char(date_time, '%Y-%m-%d');
