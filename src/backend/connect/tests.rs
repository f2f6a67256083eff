//! Unit tests of the connect queue: the slot limit, arrival order, waiting for a descriptor and
//! both timeouts, on paused time.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::{is_out_of_fds, Connects, Refused};

fn emfile() -> io::Error {
    io::Error::from_raw_os_error(libc::EMFILE)
}

#[tokio::test(start_paused = true)]
async fn no_more_than_max_connecting_run_at_once_and_the_rest_go_in_arrival_order() {
    let q = Arc::new(Connects::new(2, Duration::from_secs(30)));
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (q, running, peak, order) = (q.clone(), running.clone(), peak.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            q.run(
                || async {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    order.lock().push(i);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, io::Error>(i)
                },
                is_out_of_fds,
            )
            .await
        }));
        // Each turn queues before the next arrives.
        tokio::task::yield_now().await;
    }
    tokio::task::yield_now().await;
    assert_eq!(q.waiting(), 4, "four turns wait for the two slots");
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.expect("task").expect("connected"), i);
    }
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    assert_eq!(*order.lock(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(q.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_turn_that_finds_no_free_descriptor_waits_for_one_and_then_connects() {
    let q = Connects::new(0, Duration::from_secs(30));
    let tries = AtomicUsize::new(0);
    let connect = || async {
        // Descriptors free up after the fifth try.
        if tries.fetch_add(1, Ordering::SeqCst) < 5 {
            Err(emfile())
        } else {
            Ok("connected")
        }
    };
    let got = q
        .run(connect, is_out_of_fds)
        .await
        .expect("waited, then connected");
    assert_eq!(got, "connected");
    assert_eq!(tries.load(Ordering::SeqCst), 6);
    assert_eq!(q.out_of_fds(), 1, "counted once per turn, not per try");
    assert_eq!(q.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_turn_gives_up_on_a_descriptor_at_the_queue_timeout_and_says_how_long_it_waited() {
    let q = Connects::new(4, Duration::from_secs(2));
    let started = tokio::time::Instant::now();
    let err = q
        .run(|| async { Err::<(), _>(emfile()) }, is_out_of_fds)
        .await
        .expect_err("never a descriptor");
    match err {
        Refused::Failed { error, waited } => {
            assert!(is_out_of_fds(&error));
            let waited = waited.expect("it waited");
            assert!(waited > Duration::from_millis(1_000) && waited <= Duration::from_secs(2));
        }
        other => panic!("expected the connect's own error, got {other:?}"),
    }
    assert!(started.elapsed() <= Duration::from_secs(2));
    assert_eq!(q.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn other_connect_errors_fail_at_once() {
    let q = Connects::new(1, Duration::from_secs(30));
    let tries = AtomicUsize::new(0);
    let err = q
        .run(
            || async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionRefused))
            },
            is_out_of_fds,
        )
        .await
        .expect_err("refused");
    assert!(matches!(err, Refused::Failed { waited: None, .. }));
    assert_eq!(tries.load(Ordering::SeqCst), 1);
    assert_eq!(q.out_of_fds(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_turn_that_waits_too_long_for_a_slot_is_refused_and_stops_waiting() {
    let q = Arc::new(Connects::new(1, Duration::from_secs(1)));
    let hold = Arc::new(Notify::new());
    let first = {
        let (q, hold) = (q.clone(), hold.clone());
        tokio::spawn(async move {
            q.run(
                || async {
                    hold.notified().await;
                    Ok::<_, io::Error>(())
                },
                is_out_of_fds,
            )
            .await
        })
    };
    tokio::task::yield_now().await;
    let second = q
        .run(|| async { Ok::<_, io::Error>(()) }, is_out_of_fds)
        .await;
    assert!(matches!(second, Err(Refused::Queue(d)) if d == Duration::from_secs(1)));
    assert_eq!(q.waiting(), 0);
    hold.notify_one();
    first.await.expect("task").expect("the first connects");
}
