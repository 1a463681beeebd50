-- Nexmark q3: local item suggestion. Sellers in Oregon, Idaho or California with auctions in
-- category 10: a regular join of persons and auctions (no window). An inner join of
-- append-only streams only ever adds rows, so its result is append-only: each pair is
-- emitted once, when its second row arrives. Both sides keep their rows (RocksDB), as in
-- Flink; SET state_ttl bounds them. The generator weir wraps (the `nexmark` crate) writes
-- states in lower case ('or' where Flink's Java generator writes 'OR').

CREATE TABLE person (
  id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR,
  state VARCHAR, date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'person', events = '1000000');

CREATE TABLE auction (
  id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT,
  date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000');

SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca');
