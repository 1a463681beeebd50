-- Nexmark q14: calculation. Bids in a price band, converted to euros, with the part of the
-- day and the number of 'c' characters in `extra`. Flink's query calls a UDF, count_char;
-- here it is the same count by built-in functions (length minus the length without 'c'),
-- and HOUR(date_time) is date_part('hour', date_time). Stateless.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT auction, bidder, 0.908 * price AS price,
  CASE
    WHEN date_part('hour', date_time) >= 8 AND date_part('hour', date_time) <= 18 THEN 'dayTime'
    WHEN date_part('hour', date_time) <= 6 OR date_part('hour', date_time) >= 20 THEN 'nightTime'
    ELSE 'otherTime'
  END AS bid_time_type,
  date_time, extra,
  character_length(extra) - character_length(replace(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;
