//! Tests of the recording rules and the end-of-run verdict, on byte slices.

use super::*;
use crate::record::format::agui::Agui;

fn ingest(commit: Commit) -> Ingest {
    Ingest::new(Some(&Agui), commit, 1024)
}

fn feed(i: &mut Ingest, bytes: &'static [u8]) -> Vec<Event> {
    let mut batch = Vec::new();
    i.feed(&Bytes::from_static(bytes), &mut batch);
    batch
}

fn persisted_event() -> Commit {
    Commit::Event {
        ty: "CUSTOM".into(),
        name: Some("persisted".into()),
    }
}

#[test]
fn a_read_becomes_one_batch_of_complete_events() {
    let mut i = ingest(Commit::Eof);
    let b = feed(
        &mut i,
        b"data: {\"type\":\"RUN_STARTED\"}\n\ndata: {\"type\":\"TEXT_",
    );
    assert_eq!(b.len(), 1);
    let b = feed(
        &mut i,
        b"MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"x\"}\n\n",
    );
    assert_eq!(b[0].ty(), b"TEXT_MESSAGE_CONTENT");
    assert_eq!((i.events(), i.bytes()), (2, 97));
}

#[test]
fn an_oversized_event_is_reported_and_the_next_one_recorded() {
    let mut i = ingest(Commit::Eof);
    let big = format!(
        "data: {}\n\ndata: {{\"type\":\"RUN_FINISHED\"}}\n\n",
        "x".repeat(2000)
    );
    let mut batch = Vec::new();
    let fed = i.feed(&Bytes::from(big), &mut batch);
    assert_eq!(fed.oversized.len(), 1);
    assert_eq!(batch.len(), 1);
    assert!(batch[0].terminal);
    // The answer's record lost an event: never persisted, whatever the commit rule.
    assert_eq!(
        i.verdict(Ending::Clean),
        Verdict {
            persisted: false,
            reason: Some(EndReason::EventTooLarge)
        }
    );
}

#[test]
fn a_lost_event_is_not_persisted_under_any_commit_rule_and_a_failure_still_says_so() {
    let big = Bytes::from(format!("data: {}\n\n", "x".repeat(2000)));
    for commit in [Commit::CleanEnd, persisted_event()] {
        let mut i = ingest(commit);
        feed(
            &mut i,
            b"data: {\"type\":\"CUSTOM\",\"name\":\"persisted\"}\n\n",
        );
        i.feed(&big, &mut Vec::new());
        assert_eq!(
            i.verdict(Ending::Clean),
            Verdict {
                persisted: false,
                reason: Some(EndReason::EventTooLarge)
            }
        );
        assert_eq!(
            i.verdict(Ending::Failed(EndReason::UpstreamReset)).reason,
            Some(EndReason::UpstreamReset)
        );
    }
}

#[test]
fn an_unfinished_event_is_held_against_the_budget_and_dropped_when_it_has_no_room() {
    let budget = crate::budget::Budget::new(200);
    let mut i = ingest(Commit::Eof).with_budget(&budget);
    let mut batch = Vec::new();
    let fed = i.feed(
        &Bytes::from_static(b"data: {\"type\":\"RUN_STA"),
        &mut batch,
    );
    // What is allocated for it, not its 22 bytes: the smallest line buffer.
    assert_eq!((fed.over_budget, budget.used()), (None, 64));
    // Someone else takes the rest of the budget; the event cannot grow and is dropped.
    let other = budget.try_charge(136).unwrap();
    let fed = i.feed(
        &Bytes::from(format!("RTED\"{}", " ".repeat(66))),
        &mut batch,
    );
    assert_eq!((fed.over_budget, budget.used()), (Some(93), 136));
    // Decoding resumes after its blank line; complete events need no room.
    let fed = i.feed(
        &Bytes::from_static(b"}\n\ndata: {\"type\":\"RUN_FINISHED\"}\n\n"),
        &mut batch,
    );
    assert_eq!((fed.over_budget, batch.len()), (None, 1));
    assert_eq!(
        i.verdict(Ending::Clean).reason,
        Some(EndReason::EventTooLarge)
    );
    drop(other);
    i.feed(&Bytes::from_static(b"data: par"), &mut batch);
    // The line buffer it grew to (96 bytes, small enough to be kept) holds it.
    assert_eq!(budget.used(), 96);
    i.finish();
    assert_eq!(budget.used(), 0, "an ended stream holds nothing");
}

#[test]
fn eof_commit_persists_only_a_clean_end_after_a_terminal_event() {
    let mut i = ingest(Commit::Eof);
    feed(&mut i, b"data: {\"type\":\"RUN_STARTED\"}\n\n");
    assert_eq!(
        i.verdict(Ending::Clean),
        Verdict {
            persisted: false,
            reason: Some(EndReason::NoTerminalEvent)
        }
    );
    feed(&mut i, b"data: {\"type\":\"RUN_FINISHED\"}\n\n");
    assert_eq!(
        i.verdict(Ending::Clean),
        Verdict {
            persisted: true,
            reason: None
        }
    );
    let failed = i.verdict(Ending::Failed(EndReason::UpstreamTimeout));
    assert_eq!(
        (failed.persisted, failed.reason),
        (false, Some(EndReason::UpstreamTimeout))
    );
    let stopped = i.verdict(Ending::Stopped(EndReason::Cancelled));
    assert_eq!(
        (stopped.persisted, stopped.reason),
        (false, Some(EndReason::Cancelled))
    );
}

#[test]
fn event_commit_needs_the_named_event_and_survives_a_later_reset() {
    let mut i = ingest(persisted_event());
    feed(&mut i, b"data: {\"type\":\"RUN_FINISHED\"}\n\n");
    assert_eq!(
        i.verdict(Ending::Clean).reason,
        Some(EndReason::NotCommitted)
    );
    feed(
        &mut i,
        b"data: {\"type\":\"CUSTOM\",\"name\":\"other\"}\n\n",
    );
    assert!(!i.verdict(Ending::Clean).persisted);
    feed(
        &mut i,
        b"data: {\"type\":\"CUSTOM\",\"name\":\"persisted\"}\n\n",
    );
    assert!(i.verdict(Ending::Clean).persisted);
    assert!(
        i.verdict(Ending::Failed(EndReason::UpstreamReset))
            .persisted
    );
    assert!(!i.verdict(Ending::Stopped(EndReason::MaxDuration)).persisted);
}

#[test]
fn an_upstream_that_stops_inside_an_event_is_reported_by_finish() {
    let mut i = ingest(Commit::Eof);
    feed(&mut i, b"data: {\"type\":\"RUN_FINISHED\"}");
    assert!(i.finish());
    assert_eq!(
        i.verdict(Ending::Clean).reason,
        Some(EndReason::NoTerminalEvent)
    );
}

#[test]
fn outcome_labels_follow_the_end() {
    let end = |persisted, superseded| End {
        seq: 1,
        persisted,
        superseded,
        next_run_id: None,
        reason: None,
    };
    assert_eq!(
        outcome(&end(false, true), Ending::Clean),
        RunOutcome::Superseded
    );
    assert_eq!(
        outcome(&end(false, false), Ending::Stopped(EndReason::Cancelled)),
        RunOutcome::Cancelled
    );
    assert_eq!(
        outcome(&end(false, false), Ending::Stopped(EndReason::Abandoned)),
        RunOutcome::NotPersisted
    );
    assert_eq!(
        outcome(&end(true, false), Ending::Clean),
        RunOutcome::Persisted
    );
}

#[test]
fn clean_end_commit_persists_any_clean_end_and_nothing_else() {
    let mut i = ingest(Commit::CleanEnd);
    feed(
        &mut i,
        b"data: {\"protocol_version\":2,\"event_index\":0,\"events\":[]}\n\n",
    );
    assert_eq!(
        i.verdict(Ending::Clean),
        Verdict {
            persisted: true,
            reason: None
        }
    );
    let cut = i.verdict(Ending::Failed(EndReason::UpstreamReset));
    assert_eq!(
        (cut.persisted, cut.reason),
        (false, Some(EndReason::UpstreamReset))
    );
    assert!(!i.verdict(Ending::Stopped(EndReason::Cancelled)).persisted);
}

#[test]
fn raw_frames_and_event_aliases_come_with_their_events() {
    let mut i = ingest(Commit::Eof)
        .keep_raw(Some("/n".into()))
        .find_aliases(vec!["/run_id".into(), "/never".into()]);
    let b = feed(
        &mut i,
        b"id: a\ndata: {\"type\":\"RUN_STARTED\",\"run_id\":\"r-1\",\"n\":3}\n\n: hi\n\ndata: {\"type\":\"X\"}\n\n",
    );
    assert_eq!(b.len(), 2);
    let raw = i.take_raw();
    assert_eq!(raw.len(), 2);
    assert_eq!(
        &raw[0].bytes[..],
        b"id: a\ndata: {\"type\":\"RUN_STARTED\",\"run_id\":\"r-1\",\"n\":3}\n\n"
    );
    assert_eq!((raw[0].cursor, raw[1].cursor), (Some(3), None));
    assert_eq!(raw[1].id.as_deref(), Some(&b"a"[..]), "the id in force");
    assert_eq!(i.take_aliases(), ["r-1"]);
    assert!(i.take_aliases().is_empty(), "found once");
}

#[test]
fn a_top_level_cursor_reads_as_the_whole_document_would() {
    let docs: [&[u8]; 9] = [
        br#"{"type":"x","sequence_number":7}"#,
        br#"{"sequence_number":7,"nested":{"sequence_number":9},"list":[1,{"a":"}"}]}"#,
        br#"{"sequence_number":"7"}"#,
        br#"{"sequence_number":7.5}"#,
        br#"{"sequence_number":1,"sequence_number":2}"#,
        br#"{"seq\u0075ence_number":4}"#,
        br#"{"other":1}"#,
        br#"[1,2]"#,
        br#"{"sequence_number":3} trailing"#,
    ];
    for d in docs {
        let whole = serde_json::from_slice::<serde_json::Value>(d)
            .ok()
            .and_then(|v| v.pointer("/sequence_number")?.as_i64());
        assert_eq!(
            super::int_at(d, "/sequence_number"),
            whole,
            "{}",
            String::from_utf8_lossy(d)
        );
    }
    assert_eq!(
        super::int_at(br#"{"a":{"b":5}}"#, "/a/b"),
        Some(5),
        "a deep pointer"
    );
    assert_eq!(
        super::int_at(br#"{"a/b":5}"#, "/a~1b"),
        Some(5),
        "an escaped pointer"
    );
}

#[test]
fn a_body_that_ends_with_the_connection_ends_cleanly_only_after_its_terminal_event() {
    for commit in [Commit::CleanEnd, Commit::Eof] {
        let mut i = ingest(commit.clone());
        feed(&mut i, b"data: {\"type\":\"RUN_STARTED\"}\n\n");
        assert_eq!(
            i.at_close(),
            Ending::Failed(EndReason::UpstreamReset),
            "{commit:?}"
        );
        let v = i.verdict(i.at_close());
        assert_eq!(
            (v.persisted, v.reason),
            (false, Some(EndReason::UpstreamReset))
        );
        feed(&mut i, b"data: {\"type\":\"RUN_FINISHED\"}\n\n");
        assert_eq!(i.at_close(), Ending::Clean, "{commit:?}");
        assert!(i.verdict(i.at_close()).persisted, "{commit:?}");
    }
}

#[test]
fn unique_ids_make_every_frame_of_a_burst_of_one_id_its_own_resume_point() {
    use crate::journal::raw::{RawLog, Seek};
    // LangGraph's in-memory runtime: `<ms>-0`, shared by every event of one millisecond; CRLF
    // and a read that ends mid-frame.
    let mut i = ingest(Commit::CleanEnd).keep_raw(None).unique_ids();
    let one =
        |id: &str, n: u32| format!("id: {id}\r\nevent: messages\r\ndata: {{\"n\":{n}}}\r\n\r\n");
    let mut body = one("1760-0", 0);
    (1..5).for_each(|n| body.push_str(&one("1761-0", n)));
    body.push_str(&one("1762-0", 5));
    let (a, b) = body.split_at(body.len() / 2);
    let mut log = RawLog::new(1 << 20);
    let mut batch = Vec::new();
    for part in [a, b] {
        i.feed(&Bytes::copy_from_slice(part.as_bytes()), &mut batch);
        i.take_raw().into_iter().for_each(|f| log.push(f));
    }
    let frames = log.read(0, 10);
    let id_of = |b: &[u8]| {
        let s = std::str::from_utf8(b).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("id: "))
            .unwrap()
            .to_string()
    };
    let got: Vec<String> = frames.iter().map(|(_, b)| id_of(b)).collect();
    assert_eq!(
        got,
        ["1760-0", "1761-0", "1761-0~2", "1761-0~3", "1761-0~4", "1762-0"]
    );
    // The upstream's unique ids are its own bytes (line endings normalized).
    assert_eq!(
        &frames[5].1[..],
        b"id: 1762-0\nevent: messages\ndata: {\"n\":5}\n\n"
    );
    // Each id, plain or suffixed, resumes right after its own frame.
    for (n, id) in got.iter().enumerate() {
        assert_eq!(log.seek_id(id.as_bytes()), Seek::From(n as u64 + 1), "{id}");
    }
}

#[test]
fn the_remembered_ids_are_held_bytes_until_the_read_ends() {
    let mut i = ingest(Commit::CleanEnd).keep_raw(None).unique_ids();
    let mut plain = ingest(Commit::CleanEnd).keep_raw(None);
    let body: String = (0..1000)
        .map(|n| format!("id: {n}-0\ndata: {{\"n\":{n}}}\n\n"))
        .collect();
    let body = Bytes::from(body);
    let mut batch = Vec::new();
    i.feed(&body, &mut batch);
    plain.feed(&body, &mut batch);
    assert!(
        i.held_bytes() >= 1000 * 8,
        "1,000 ids remembered in {} bytes",
        i.held_bytes()
    );
    assert_eq!(plain.held_bytes(), 0, "ids relayed as they are: none kept");
    i.finish();
    assert_eq!(i.held_bytes(), 0);
}

#[test]
fn a_stopped_ai_sdk_run_ends_with_abort_and_done_and_says_whether_its_bytes_ended_cleanly() {
    use crate::record::format::ai_sdk::{AiSdk, STOP_FRAMES};
    let text = b"data: {\"type\":\"text-delta\",\"id\":\"t\",\"delta\":\"a\"}\n\n";
    for (tail, clean) in [(&b""[..], true), (&b"data: {\"type\":\"text-de"[..], false)] {
        let mut i = Ingest::new(Some(&AiSdk), Commit::Eof, 1024).keep_raw(None);
        let mut chunk = text.to_vec();
        chunk.extend_from_slice(tail);
        i.feed(&Bytes::from(chunk), &mut Vec::new());
        let _ = i.take_raw();
        let bytes = i.bytes();
        let mut batch = Vec::new();
        let told = i.stop(&mut batch).expect("the AI SDK tells a stop");
        assert_eq!((&told.bytes[..], told.clean), (STOP_FRAMES, clean));
        // The unfinished delta is dropped; the abort chunk, then [DONE] (RAW), are recorded.
        let types: Vec<&[u8]> = batch.iter().map(|e| e.ty()).collect();
        assert_eq!(types, [&b"abort"[..], b"RAW"]);
        assert!(batch[1].terminal);
        let raw: Vec<Bytes> = i.take_raw().into_iter().map(|f| f.bytes).collect();
        assert_eq!(raw.concat(), STOP_FRAMES);
        assert_eq!(i.bytes(), bytes, "not counted as upstream bytes");
        assert!(!i.finish(), "nothing unfinished is left");
        let v = i.verdict(Ending::Stopped(EndReason::Cancelled));
        assert_eq!((v.persisted, v.reason), (false, Some(EndReason::Cancelled)));
    }
    // A format without a stop event, or a stream whose format is still unknown: nothing.
    let mut i = ingest(Commit::Eof);
    feed(&mut i, b"data: {\"type\":\"RUN_STARTED\"}\n\n");
    let mut batch = Vec::new();
    assert_eq!(i.stop(&mut batch), None);
    assert_eq!(Ingest::new(None, Commit::Eof, 1024).stop(&mut batch), None);
    assert!(batch.is_empty());
}

#[test]
fn usage_is_metered_on_request_over_any_read_split_of_a_detected_format() {
    let body: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    for cut in [1, 40, 150, body.len() - 1] {
        let mut i = Ingest::new(None, Commit::Eof, 1 << 20).meter_usage(None);
        let mut batch = Vec::new();
        i.feed(&Bytes::copy_from_slice(&body[..cut]), &mut batch);
        i.feed(&Bytes::copy_from_slice(&body[cut..]), &mut batch);
        assert_eq!(i.format(), Some(FormatKind::Anthropic));
        let end = i.usage().unwrap().finish();
        assert!(!end.usage_missing, "cut at {cut}");
        let u = end.usage.unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (Some(10), Some(5)));
    }
    // Off unless asked for.
    let mut i = Ingest::new(None, Commit::Eof, 1 << 20);
    i.feed(&Bytes::from_static(body), &mut Vec::new());
    assert!(i.usage().is_none());
}
