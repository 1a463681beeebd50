-- Kafka pipeline, step 1: write 100,000 Nexmark bids into the topic `bids` (JSON values,
-- keyed by auction), exactly once. Run against a broker on 127.0.0.1:9092 with the topics
-- made (see README.md in this folder):
--   weir -f examples/kafka/1_produce_bids.sql --data-dir /tmp/weir-kafka

CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP)
WITH (connector = 'nexmark', stream = 'bid', events = '100000');

CREATE SINK bids_to_kafka WITH (
  connector = 'kafka', topic = 'bids', bootstrap_servers = '127.0.0.1:9092',
  format = 'json', key = 'auction'
) AS SELECT auction, bidder, price, date_time FROM bid;
