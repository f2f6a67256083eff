//! Tests of the legacy tee: a clean end is told apart from a cut, even on a full queue, and the
//! queue is bounded in bytes against its own and the sidecar-wide budget.

use super::*;

fn roomy() -> (Tee, TeeReader) {
    tee(usize::MAX, &Budget::unlimited())
}

#[tokio::test]
async fn a_clean_end_reaches_a_legacy_reader_whose_queue_is_full() {
    let (t, mut r) = roomy();
    for i in 0..RAW_QUEUE {
        t.send(Bytes::from(i.to_string())).unwrap();
    }
    assert_eq!(
        t.send(Bytes::from_static(b"x")),
        Err(Cut::Slow(CutReason::QueueFull)),
        "queue is full"
    );
    t.end_clean();
    for i in 0..RAW_QUEUE {
        assert_eq!(r.next().await, Ok(Some(Bytes::from(i.to_string()))));
    }
    assert_eq!(r.next().await, Ok(None));
}

#[tokio::test]
async fn a_tee_dropped_without_the_clean_mark_is_a_cut() {
    let (t, mut r) = roomy();
    t.send(Bytes::from_static(b"a")).unwrap();
    drop(t);
    assert_eq!(r.next().await, Ok(Some(Bytes::from_static(b"a"))));
    assert_eq!(r.next().await, Err(StreamCut));
}

#[tokio::test]
async fn the_queue_is_bounded_in_bytes_and_the_chunk_being_written_counts() {
    let global = Budget::unlimited();
    let chunk = Bytes::from(vec![b'x'; 1000]);
    let each = chunk.len() + CHUNK_OVERHEAD;
    let (t, mut r) = tee(3 * each, &global);
    for _ in 0..3 {
        t.send(chunk.clone()).unwrap();
    }
    assert_eq!(t.send(chunk.clone()), Err(Cut::Slow(CutReason::QueueFull)));
    assert_eq!(global.used(), 3 * each);
    // Handed out but not yet written: still counted, so there is no room yet.
    r.next().await.unwrap();
    assert_eq!(global.used(), 3 * each);
    assert!(t.send(chunk.clone()).is_err());
    // The next read means the previous chunk was written: one chunk of room.
    r.next().await.unwrap();
    t.send(chunk.clone()).unwrap();
    assert_eq!(global.used(), 3 * each);
}

#[tokio::test]
async fn the_sidecar_budget_cuts_a_reader_and_dropping_it_gives_everything_back() {
    let global = Budget::new(5000);
    let chunk = Bytes::from(vec![b'x'; 2000]);
    let (t, r) = tee(usize::MAX, &global);
    t.send(chunk.clone()).unwrap();
    t.send(chunk.clone()).unwrap();
    assert_eq!(t.send(chunk), Err(Cut::Slow(CutReason::Budget)));
    t.cut();
    // A relay stuck writing notices the cut.
    r.cut().await;
    drop(r);
    assert_eq!(global.used(), 0);
}

#[tokio::test]
async fn a_cut_reader_reads_no_more_of_its_queue() {
    let (t, mut r) = roomy();
    t.send(Bytes::from_static(b"a")).unwrap();
    t.cut();
    assert_eq!(r.next().await, Err(StreamCut));
}

#[tokio::test]
async fn a_reader_that_left_is_gone_not_slow() {
    let (t, r) = roomy();
    drop(r);
    assert_eq!(t.send(Bytes::from_static(b"a")), Err(Cut::Gone));
}
