-- Kafka pipeline, step 2: read `bids`, count bids and find the top price per auction in
-- 10-second tumbling windows, and write each window's results to `top_bids` in one Kafka
-- transaction per checkpoint (exactly once: a consumer with isolation.level=read_committed
-- sees every result once, whatever crashes happen in between).
--   weir -f examples/kafka/2_top_bids.sql --data-dir /tmp/weir-kafka

CREATE TABLE bids (
  auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
  connector = 'kafka', topic = 'bids', bootstrap_servers = '127.0.0.1:9092',
  format = 'json', stop_at = 'end'
);

SET checkpoint_interval = '1s';

CREATE SINK top_bids WITH (
  connector = 'kafka', topic = 'top_bids', bootstrap_servers = '127.0.0.1:9092',
  format = 'json', key = 'auction'
) AS
SELECT window_start, window_end, auction, count(*) AS bids, max(price) AS top_price
FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
GROUP BY window_start, window_end, auction;
