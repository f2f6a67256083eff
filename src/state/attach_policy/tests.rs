//! Tests of the attach table and of waiting for a run.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::*;
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::SseEvent;
use crate::state::registry::Admission;

fn text(d: &str) -> crate::record::format::Event {
    Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from(
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":d}).to_string(),
        ),
        id: None,
    })
}

fn live(reg: &Arc<Registry>, chat: &str, id: &str, window: usize) -> Arc<Run> {
    let p = reg
        .register(
            &Scope::from(chat),
            Owner::NONE,
            &RunId::from(id),
            Admission::Always,
        )
        .unwrap();
    let run = Arc::new(Run::new(id, window));
    reg.go_live(&p, run.clone());
    run
}

#[test]
fn attach_table_without_cursor() {
    let reg = Registry::new(Duration::from_secs(60), 8);
    assert!(matches!(
        decide(&reg, &Scope::from("c"), &Owner::NONE, None, None),
        Decision::Missing
    ));
    let run = live(&reg, "c", "r1", 8);
    assert!(matches!(
        decide(&reg, &Scope::from("c"), &Owner::NONE, None, None),
        Decision::Serve {
            start: Start::Snapshot,
            reset: None,
            ..
        }
    ));
    run.finish(false, Some(crate::vocab::end::EndReason::UpstreamReset));
    assert!(matches!(
        decide(&reg, &Scope::from("c"), &Owner::NONE, None, None),
        Decision::Serve {
            start: Start::Snapshot,
            ..
        }
    ));
    let run2 = live(&reg, "c", "r2", 8);
    run2.finish(true, None);
    assert!(matches!(
        decide(&reg, &Scope::from("c"), &Owner::NONE, None, None),
        Decision::NoContent
    ));
}

#[test]
fn attach_table_with_cursor() {
    let reg = Registry::new(Duration::from_secs(60), 8);
    assert!(matches!(
        decide(
            &reg,
            &Scope::from("c"),
            &Owner::NONE,
            Some(&RunId::from("nope")),
            Some(3)
        ),
        Decision::NoContent
    ));
    let run = live(&reg, "c", "r1", 2);
    for d in ["a", "b", "c", "d"] {
        run.append(&[text(d)]);
    }
    let reset = |d: Decision| match d {
        Decision::Serve {
            start: Start::Snapshot,
            reset,
            ..
        } => reset,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reset(decide(
            &reg,
            &Scope::from("c"),
            &Owner::NONE,
            Some(&RunId::from("nope")),
            Some(3)
        )),
        Some(ResetReason::UnknownRun)
    );
    assert_eq!(
        reset(decide(
            &reg,
            &Scope::from("c"),
            &Owner::NONE,
            Some(&RunId::from("r1")),
            Some(9)
        )),
        Some(ResetReason::FutureCursor)
    );
    assert_eq!(
        reset(decide(
            &reg,
            &Scope::from("c"),
            &Owner::NONE,
            Some(&RunId::from("r1")),
            Some(1)
        )),
        Some(ResetReason::ExpiredCursor)
    );
    assert!(matches!(
        decide(
            &reg,
            &Scope::from("c"),
            &Owner::NONE,
            Some(&RunId::from("r1")),
            Some(3)
        ),
        Decision::Serve {
            start: Start::After(3),
            reset: None,
            ..
        }
    ));
    run.finish(true, None);
    // At the head of a completed run: served from the cursor, which yields just STREAM_END.
    assert!(matches!(
        decide(
            &reg,
            &Scope::from("c"),
            &Owner::NONE,
            Some(&RunId::from("r1")),
            Some(4)
        ),
        Decision::Serve {
            start: Start::After(4),
            ..
        }
    ));
}

#[tokio::test]
async fn waiting_attach_gets_the_run_as_soon_as_it_is_live() {
    let reg = Registry::new(Duration::from_secs(60), 8);
    let r2 = reg.clone();
    let waiter = tokio::spawn(async move {
        wait_for_run(
            &r2,
            &Scope::from("c"),
            &Owner::NONE,
            Duration::from_secs(30),
        )
        .await
    });
    tokio::task::yield_now().await;
    live(&reg, "c", "r1", 8);
    match waiter.await.unwrap() {
        Decision::Serve { run, .. } => assert_eq!(run.id(), "r1"),
        other => panic!("{other:?}"),
    }
    let d = wait_for_run(
        &reg,
        &Scope::from("none"),
        &Owner::NONE,
        Duration::from_millis(1),
    )
    .await;
    assert!(matches!(d, Decision::NoContent));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_attach_waits_exactly_wait_ms_for_a_run() {
    let reg = Registry::new(Duration::from_secs(60), 8);
    let start = tokio::time::Instant::now();
    let d = wait_for_run(
        &reg,
        &Scope::from("c"),
        &Owner::NONE,
        Duration::from_secs(30),
    )
    .await;
    assert!(matches!(d, Decision::NoContent));
    assert_eq!(start.elapsed(), Duration::from_secs(30));

    let r2 = reg.clone();
    let waiter = tokio::spawn(async move {
        wait_for_run(
            &r2,
            &Scope::from("c"),
            &Owner::NONE,
            Duration::from_secs(30),
        )
        .await
    });
    tokio::time::sleep(Duration::from_secs(29)).await;
    live(&reg, "c", "r1", 8);
    match waiter.await.unwrap() {
        Decision::Serve { run, start: s, .. } => {
            assert_eq!((run.id().as_str(), s), ("r1", Start::Snapshot));
        }
        other => panic!("{other:?}"),
    }
}
