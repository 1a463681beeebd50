//! Tests of [`super::OpenSessions`]: placement, stored formats, the budget and restores.

use super::*;

fn shape(s: &Sessions) -> Vec<(EventTime, EventTime, i64)> {
    s.iter().map(|(&st, x)| (st, x.end, x.state.rows)).collect()
}

#[test]
fn rows_bridge_sessions_and_their_states_add() {
    let mut s = Sessions::new();
    let (mut bytes, mut moved) = (0, Vec::new());
    let mut put = |s: &mut Sessions, t, w, moved: &mut Vec<_>| {
        let (start, retimed) = place_row(s, (t, 10, w), 1, &[false], &mut bytes, moved)?;
        s.get_mut(&start)?.state.rows += 1;
        Some((start, retimed))
    };
    assert_eq!(put(&mut s, 0, EventTime::MIN, &mut moved), Some((0, true)));
    assert_eq!(
        put(&mut s, 25, EventTime::MIN, &mut moved),
        Some((25, true))
    );
    // Inside [0, 10): the end does not move.
    assert_eq!(put(&mut s, 0, EventTime::MIN, &mut moved), Some((0, false)));
    assert_eq!(put(&mut s, 5, EventTime::MIN, &mut moved), Some((0, true)));
    assert_eq!(moved, vec![(0, 10)]);
    assert_eq!(shape(&s), vec![(0, 15, 3), (25, 35, 1)]);
    // 15 touches [0, 15) and [25, 35): one session of all five rows.
    moved.clear();
    assert_eq!(put(&mut s, 15, EventTime::MIN, &mut moved), Some((0, true)));
    assert_eq!(shape(&s), vec![(0, 35, 5)]);
    moved.sort();
    assert_eq!(moved, vec![(0, 15), (25, 35)]);
    // Late: its own window [50, 60) ended under 70 and it touches nothing.
    assert_eq!(put(&mut s, 50, 70, &mut moved), None);
    // Earlier than the session it touches: the start moves.
    assert_eq!(put(&mut s, -8, 0, &mut moved), Some((-8, true)));
    assert_eq!(shape(&s), vec![(-8, 35, 6)]);
    let sizes: usize = s.values().map(|x| x.bytes).sum();
    assert_eq!(
        bytes, sizes,
        "bytes follow the sessions made and merged away"
    );
}

#[test]
fn stored_keys_round_trip_in_both_formats() {
    let handle = StateHandle::in_memory();
    let old = handle.key_of_parts(&[&[OLD_TAG], &3u32.to_be_bytes(), b"abc", &ordered(-5)]);
    let suffix = &old[handle.prefix_len()..];
    assert_eq!(parse_old(suffix).unwrap(), (&b"abc"[..], -5));
    assert!(parse_old(&suffix[..suffix.len() - 1]).is_err());
    assert_eq!(key_of_stored(suffix).unwrap(), b"abc");
    let new = handle.key_of_parts(&[&[KEY_TAG], b"xyz"]);
    assert_eq!(key_of_stored(&new[handle.prefix_len()..]).unwrap(), b"xyz");
    let mut open = Sessions::new();
    for (start, end, rows) in [(-7, 3, 2), (10, 40, 5)] {
        let mut state = GroupState::new(2);
        state.rows = rows;
        state.aggs[1].v = 99;
        open.insert(start, Session::new(end, state));
    }
    let back = decode_sessions(&encode_sessions(&open), 2).unwrap();
    assert_eq!(shape(&back), shape(&open));
    assert_eq!(back[&10].state, open[&10].state);
    assert!(decode_sessions(&encode_sessions(&open)[..30], 2).is_err());
}

/// A fired session: key, start, end and rows.
type FiredRow = (Vec<u8>, EventTime, EventTime, i64);

/// Rows of `keys` keys, a key every `gap / 4` apart in time per key.
fn rows(keys: u64, per_key: i64, gap: i64) -> Vec<(Vec<u8>, EventTime)> {
    let mut out = Vec::new();
    for i in 0..per_key {
        for k in 0..keys {
            // Every third key pauses past the gap halfway: two sessions.
            let pause = if k % 3 == 0 && i >= per_key / 2 {
                2 * gap
            } else {
                0
            };
            out.push((k.to_be_bytes().to_vec(), i * gap / 4 + pause + k as i64));
        }
    }
    out.sort_by_key(|(_, t)| *t);
    out
}

/// Fires what ends before `t` into `fired`, then places a row of `key` at `t` (the watermark
/// just behind it) counting it into its session; whether it was placed.
fn step(
    sessions: &mut OpenSessions,
    key: &[u8],
    t: EventTime,
    gap: i64,
    fired: &mut Vec<Fired>,
) -> bool {
    while sessions.fire_until(t - 1, fired).unwrap() {}
    sessions
        .place(key, (t, gap, t - 1), |s| {
            s.rows += 1;
            Ok(())
        })
        .unwrap()
}

/// Places `rows` in time order (the watermark just behind), firing as it goes, with the
/// budget checked after every row; returns the fired sessions `(key, start, end, rows)` and
/// the most bytes memory held after a check.
fn run(
    sessions: &mut OpenSessions,
    rows: &[(Vec<u8>, EventTime)],
    gap: i64,
    barrier_every: usize,
) -> (Vec<FiredRow>, usize) {
    let mut fired = Vec::new();
    let mut peak = 0;
    for (n, (key, t)) in rows.iter().enumerate() {
        assert!(step(sessions, key, *t, gap, &mut fired));
        assert_eq!(sessions.bytes(), sessions.recount());
        sessions.enforce_budget().unwrap();
        peak = peak.max(sessions.bytes());
        if n % barrier_every == 0 {
            sessions.flush().unwrap();
        }
    }
    while sessions.fire_until(EventTime::MAX, &mut fired).unwrap() {
        assert_eq!(sessions.bytes(), sessions.recount());
        sessions.enforce_budget().unwrap();
        peak = peak.max(sessions.bytes());
    }
    assert_eq!(sessions.bytes(), sessions.recount());
    assert_eq!(
        sessions.keys_in_memory(),
        0,
        "keys leave memory with their last session, read back or not"
    );
    let mut out: Vec<_> = fired
        .into_iter()
        .map(|f| (f.key, f.start, f.end, f.state.rows))
        .collect();
    // Fired in order of end.
    assert!(out.windows(2).all(|w| w[0].2 <= w[1].2));
    out.sort();
    (out, peak)
}

fn open(handle: &StateHandle, budget: usize) -> OpenSessions {
    OpenSessions::new(handle.sub(1), handle.sub(2), budget, vec![false])
}

#[test]
fn memory_stays_within_the_budget_and_the_sessions_are_the_same() {
    let gap = 1000;
    let rows = rows(3000, 12, gap);
    let (want, unbounded) = run(
        &mut open(&StateHandle::in_memory(), usize::MAX),
        &rows,
        gap,
        500,
    );
    assert_eq!(
        want.len(),
        4000,
        "3000 keys, a thousand of them in two sessions"
    );
    assert_eq!(want.iter().map(|w| w.3).sum::<i64>(), 36_000);
    for budget in [0, 20_000, 200_000] {
        let handle = StateHandle::in_memory();
        let mut sessions = open(&handle, budget);
        let (got, peak) = run(&mut sessions, &rows, gap, 500);
        assert_eq!(got, want, "budget {budget}");
        assert!(peak <= budget, "budget {budget}: {peak} bytes held");
        assert!(
            unbounded > 4 * budget,
            "the budget {budget} bounds something"
        );
        // Everything fired: nothing of it is left in memory or the store.
        sessions.flush().unwrap();
        assert_eq!(sessions.keys_in_memory(), 0);
        let store = handle.store().unwrap();
        let (lo, hi) = handle.all();
        assert_eq!(store.scan(&lo, &hi).unwrap(), vec![], "budget {budget}");
    }
}

#[test]
fn a_restore_reads_back_within_the_budget_and_converts_the_earlier_format() {
    let gap = 1000;
    let rows = rows(500, 8, gap);
    let half = rows.len() / 2;
    let (want, _) = run(
        &mut open(&StateHandle::in_memory(), usize::MAX),
        &rows,
        gap,
        1,
    );
    for (budget, old_format) in [
        (usize::MAX, false),
        (10_000, false),
        (usize::MAX, true),
        (10_000, true),
    ] {
        let handle = StateHandle::in_memory();
        let mut first = open(&handle, budget);
        let mut fired = Vec::new();
        for (key, t) in &rows[..half] {
            step(&mut first, key, *t, gap, &mut fired);
            first.enforce_budget().unwrap();
        }
        first.flush().unwrap();
        let store = handle.store().unwrap();
        if old_format {
            // The same sessions as one entry each, the earlier way (timers dropped).
            let (lo, hi) = handle.all();
            let mut batch = WriteBatch {
                delete_ranges: vec![(lo.clone(), hi.clone())],
                ..WriteBatch::default()
            };
            for (k, v) in store.scan(&lo, &hi).unwrap() {
                let sessions = handle.sub(1);
                if k[..2] != sessions.key(&[])[..] {
                    continue;
                }
                let key = &k[3..];
                for (start, s) in decode_sessions(&v, 1).unwrap() {
                    let len = (key.len() as u32).to_be_bytes();
                    let mut value = s.end.to_le_bytes().to_vec();
                    value.extend_from_slice(&s.state.encode());
                    batch.puts.push((
                        sessions.key_of_parts(&[&[OLD_TAG], &len, key, &ordered(start)]),
                        value,
                    ));
                }
            }
            store.write(batch).unwrap();
        }
        let mut second = open(&handle, budget);
        second.restore().unwrap();
        assert!(second.bytes() <= budget);
        let mut rest = Vec::new();
        for (key, t) in &rows[half..] {
            step(&mut second, key, *t, gap, &mut rest);
            assert_eq!(second.bytes(), second.recount());
            second.enforce_budget().unwrap();
            assert!(second.bytes() <= budget);
        }
        while second.fire_until(EventTime::MAX, &mut rest).unwrap() {}
        let mut got: Vec<_> = fired
            .into_iter()
            .chain(rest)
            .map(|f| (f.key, f.start, f.end, f.state.rows))
            .collect();
        got.sort();
        assert_eq!(got, want, "budget {budget}, old format {old_format}");
        if old_format {
            let old = handle.sub(1);
            let left = store
                .scan(&old.key(&[OLD_TAG]), &old.key(&[OLD_TAG + 1]))
                .unwrap();
            assert!(left.is_empty(), "the earlier format's entries are gone");
        }
    }
}
