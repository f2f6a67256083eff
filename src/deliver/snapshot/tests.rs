//! Tests of the snapshot cache: one serialization per seq.

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;
use crate::record::format::{agui::Agui, Event, Format};
use crate::record::sse::SseEvent;

fn text(id: &str, delta: &str) -> Event {
    let json = json!({"type":"TEXT_MESSAGE_CONTENT","messageId":id,"delta":delta}).to_string();
    Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from(json),
        id: None,
    })
}

/// The events of a `STREAM_SNAPSHOT` frame.
fn snapshot_events(frame: &[u8]) -> Vec<Value> {
    let s = std::str::from_utf8(frame).unwrap();
    let data = s
        .split('\n')
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["type"], "STREAM_SNAPSHOT");
    v["events"].as_array().unwrap().clone()
}

#[tokio::test]
async fn snapshot_is_serialized_once_per_seq() {
    let run = Run::new("r", 4);
    run.append(&[text("m", "a"), text("m", "b")]);
    let s1 = snapshot(&run).await;
    let s2 = snapshot(&run).await;
    let (seq, f1) = (s1.seq, s1.frame);
    assert_eq!(seq, 2);
    assert!(s1.serialized && !s2.serialized);
    assert_eq!(f1.as_ptr(), s2.frame.as_ptr(), "served from the cache");
    assert_eq!(
        snapshot_events(&f1),
        vec![json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"ab"})]
    );
    run.append(&[text("m", "c")]);
    let s3 = snapshot(&run).await;
    let (seq, f3) = (s3.seq, s3.frame);
    assert_eq!(seq, 3);
    assert!(s3.serialized);
    assert_eq!(snapshot_events(&f3)[0]["delta"], "abc");
}

#[tokio::test]
async fn concurrent_callers_share_one_serialization() {
    let run = std::sync::Arc::new(Run::new("r", 4));
    run.append(&[text("m", "a")]);
    let all = futures_util::future::join_all((0..8).map(|_| snapshot(&run))).await;
    assert_eq!(all.iter().filter(|s| s.serialized).count(), 1);
    assert!(all
        .iter()
        .all(|s| s.frame.as_ptr() == all[0].frame.as_ptr()));
}
