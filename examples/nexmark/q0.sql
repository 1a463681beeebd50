-- Nexmark q0: pass-through. Every bid, unchanged: measures the cost of reading and
-- emitting rows. `events` counts person, auction and bid events together (as Flink's
-- nexmark.events.num); about 92% of them are bids.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT auction, bidder, price, date_time, extra FROM bid;
