-- Nexmark q12: processing-time windows. Bids per bidder in 10-second windows of the wall
-- clock (the time weir reads each bid), as Flink's PROCTIME(). Results depend on when the
-- query runs (and a replay after a crash stamps rows anew); every bid is counted in exactly
-- one window.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR, p_time AS PROCTIME()
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TUMBLE(bid, p_time, INTERVAL '10' SECOND)
GROUP BY bidder, window_start, window_end;
