-- Nexmark q10: log to a file system. Each bid with its day and minute as text (Flink's
-- DATE_FORMAT as to_char), the columns Flink's sink partitions its files by. weir's file
-- sink writes one set of part files (no partition directories); the rows are the same.
-- Stateless.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT auction, bidder, price, date_time, extra,
  to_char(date_time, '%Y-%m-%d') AS dt,
  to_char(date_time, '%H:%M') AS hm
FROM bid;
