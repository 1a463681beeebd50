-- Nexmark q21: add a channel id. The id of the four known channels, else the channel_id
-- query parameter of the URL. Flink's REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) is
-- written with regexp_replace, keeping the value of the match's second group. Stateless.

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000');

SELECT auction, bidder, price, channel,
  CASE
    WHEN lower(channel) = 'apple' THEN '0'
    WHEN lower(channel) = 'google' THEN '1'
    WHEN lower(channel) = 'facebook' THEN '2'
    WHEN lower(channel) = 'baidu' THEN '3'
    ELSE regexp_replace(url, '^(?:|.*&)channel_id=([^&]*).*$', '\1')
  END AS channel_id
FROM bid
WHERE regexp_like(url, '(&|^)channel_id=([^&]*)')
  OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu');
