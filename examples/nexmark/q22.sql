-- Nexmark q22: get URL directories. The first three directories of each bid's URL (Flink's
-- 0-based SPLIT_INDEX(url, '/', 3) is DataFusion's 1-based split_part(url, '/', 4)).
-- Stateless.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT auction, bidder, price, channel,
  split_part(url, '/', 4) AS dir1,
  split_part(url, '/', 5) AS dir2,
  split_part(url, '/', 6) AS dir3
FROM bid;
