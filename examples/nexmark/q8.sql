-- Nexmark q8: monitor new users. The people who opened an account and created an auction in
-- the same 10-second window: a TUMBLE window join of persons and auctions. Both tables read
-- the same generator, so sellers refer to person ids.

CREATE TABLE person (
  id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR,
  state VARCHAR, date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'person', events = '1000000');

CREATE TABLE auction (
  id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT,
  date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000');

SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
  GROUP BY id, name, window_start, window_end
) AS P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
  GROUP BY seller, window_start, window_end
) AS A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
