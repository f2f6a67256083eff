//! Tests of the legacy tee: a clean end is told apart from a cut, even on a full queue.

use super::*;

#[tokio::test]
async fn a_clean_end_reaches_a_legacy_reader_whose_queue_is_full() {
    let (t, mut r) = tee();
    for i in 0..RAW_QUEUE {
        t.data.try_send(Bytes::from(i.to_string())).unwrap();
    }
    assert!(
        t.data.try_send(Bytes::from_static(b"x")).is_err(),
        "queue is full"
    );
    let _ = t.clean.send(());
    drop(t.data);
    for i in 0..RAW_QUEUE {
        assert_eq!(r.next().await, Ok(Some(Bytes::from(i.to_string()))));
    }
    assert_eq!(r.next().await, Ok(None));
}

#[tokio::test]
async fn a_tee_dropped_without_the_clean_mark_is_a_cut() {
    let (t, mut r) = tee();
    t.data.try_send(Bytes::from_static(b"a")).unwrap();
    drop(t);
    assert_eq!(r.next().await, Ok(Some(Bytes::from_static(b"a"))));
    assert_eq!(r.next().await, Err(()));
}
