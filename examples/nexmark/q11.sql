-- Nexmark q11: user sessions. Bids per bidder and session of activity, a session ending
-- after 10 seconds without a bid of that bidder. Flink writes it with the legacy GROUP BY
-- SESSION(date_time, INTERVAL '10' SECOND) and SESSION_START / SESSION_END; weir has the
-- SESSION table function (the window columns come with it). A session fires when the
-- watermark passes its end (its last bid + 10 s).

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM SESSION(bid, date_time, INTERVAL '10' SECOND, bidder)
GROUP BY bidder, window_start, window_end;
