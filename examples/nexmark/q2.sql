-- Nexmark q2: selection. The bids on a fixed set of auctions (every 123rd auction id).

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT auction, price FROM bid WHERE auction % 123 = 0;
