-- Kafka pipeline, step 3: read the committed results back (weir's Kafka source reads with
-- isolation.level=read_committed) with the record metadata.
--   weir -f examples/kafka/3_read_results.sql --format csv

CREATE TABLE top_bids (
  window_start TIMESTAMP, window_end TIMESTAMP, auction BIGINT, bids BIGINT, top_price BIGINT,
  kafka_partition INT, kafka_key VARCHAR
) WITH (
  connector = 'kafka', topic = 'top_bids', bootstrap_servers = '127.0.0.1:9092',
  format = 'json', stop_at = 'end', include = 'partition, key'
);

SELECT count(*) AS results, count(DISTINCT auction) AS auctions, sum(bids) AS bids,
       count(DISTINCT kafka_partition) AS partitions
FROM top_bids;
