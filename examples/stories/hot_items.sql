-- Story: hot items. An auction site wants the three auctions drawing the most bids right now:
-- over the last 10 seconds, refreshed every 2 seconds (Nexmark's q5 question, with a ranking).
--
--   cargo run --release -- -f examples/stories/hot_items.sql
--
-- The bids come from weir's Nexmark generator (200,000 events, the same for every run), so
-- the answer is the same every time: a DataFusion batch query over the same events checks it
-- (tests/tests/stories.rs).

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP, extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '200000');

-- Each window's top three, printed once the watermark passes the window's end. Ties go to
-- the lower auction id, so the ranking is deterministic.
SELECT window_start, window_end, auction, bids, hot_rank
FROM (
  SELECT window_start, window_end, auction, bids,
         ROW_NUMBER() OVER (PARTITION BY window_start, window_end
                            ORDER BY bids DESC, auction) AS hot_rank
  FROM (
    SELECT window_start, window_end, auction, count(*) AS bids
    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end, auction
  )
)
WHERE hot_rank <= 3;
