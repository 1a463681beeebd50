-- Story: clickstream sessions. A shop's page views (examples/data/clicks.csv: 150 users over
-- a day) grouped into visits: a visit ends after 30 minutes without a click (a SESSION
-- window per user). For each visit that ended in a purchase: how long it took, how many
-- pages it saw, how many items went into the cart.
--
--   cargo run --release -- -f examples/stories/clickstream_sessions.sql
--
-- Clicks arrive up to a few seconds out of order; the watermark waits 5 seconds.
-- tests/tests/stories.rs computes the visits from the CSV by hand and compares.

CREATE TABLE clicks (
  user_id VARCHAR, page VARCHAR, action VARCHAR, ts TIMESTAMP,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (connector = 'file', path = 'examples/data/clicks.csv', format = 'csv', header = 'true');

SELECT user_id, window_start AS visit_start, window_end AS visit_end,
       count(*) AS clicks,
       count(DISTINCT page) AS pages,
       count(*) FILTER (WHERE action = 'add_to_cart') AS added_to_cart,
       count(*) FILTER (WHERE action = 'purchase') AS purchases
FROM SESSION(clicks, ts, INTERVAL '30' MINUTE, user_id)
GROUP BY user_id, window_start, window_end
HAVING count(*) FILTER (WHERE action = 'purchase') > 0;
