//! The AG-UI scanner against `serde_json`, its reference: chosen inputs, generated ones (valid
//! objects and their mutations, in proptest) and every event of the golden fixtures. Where the
//! scanner answers, `serde_json` must accept the text and borrow the same members; where it does
//! not, the classification is `serde_json`'s own.

use bytes::Bytes;
use proptest::prelude::*;

use super::scan::scan;
use super::*;
use crate::record::sse::{Decoded, Decoder};

/// The classification by `serde_json` alone (the classifier before the scanner).
fn by_serde(data: &Bytes) -> Option<Event> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    let text = std::str::from_utf8(data).ok()?;
    match members_by_serde(text) {
        Ok(m) => Some(event_of(data, &m)),
        Err(_) => {
            serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
            Some(Event::verbatim(data.clone(), 0..0, 0..0))
        }
    }
}

/// What a classification says, comparable: its JSON, type, name, merge and whether it ends.
type Summary = (Bytes, Range<usize>, Range<usize>, Option<Merge>, bool);

/// The [`Summary`] of a classification.
fn summary(e: &Option<Event>) -> Option<Summary> {
    e.as_ref().map(|e| {
        (
            e.json.clone(),
            e.ty.clone(),
            e.name.clone(),
            e.merge.clone(),
            e.terminal,
        )
    })
}

/// The scanner agrees with `serde_json` on `data`; returns whether it answered.
fn agrees(data: &[u8]) -> bool {
    // The classifier checks UTF-8 before it scans.
    let scanned = std::str::from_utf8(data)
        .ok()
        .and_then(|t| Some((t, scan(data)?)));
    if let Some((text, m)) = &scanned {
        assert_eq!(
            members_by_serde(text).ok().as_ref(),
            Some(m),
            "members of {:?}",
            String::from_utf8_lossy(data)
        );
    }
    let bytes = Bytes::copy_from_slice(data);
    assert_eq!(
        summary(&classify_json(&bytes)),
        summary(&by_serde(&bytes)),
        "classification of {:?}",
        String::from_utf8_lossy(data)
    );
    scanned.is_some()
}

#[test]
fn scans_flat_events_as_serde_reads_them() {
    for text in [
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"he\"llo"}"#,
        r#" { "type" : "TOOL_CALL_ARGS" , "toolCallId" : "t\u00e91", "delta" : "{\"a\":1}" } "#,
        r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"x","messageId":null}"#,
        r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"a":[1,2.5e-3,-0,true,false,null,{}],"b":[]}}"#,
        r#"{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"\\ \/ \b \f \n \r \t \ud800"}"#,
        r#"{"type":5,"delta":"x","name":["a"],"messageId":{"k\"ey":1}}"#,
        "{}",
        "{\"type\":\"CUSTOM\",\"name\":\"é ünïcode 日本\",\"value\":-12.5E+7}",
        "  {\"type\":\"STEP_STARTED\",\"stepName\":\"a long name over sixteen bytes, \\\" and more\"} ",
    ] {
        assert!(agrees(text.as_bytes()), "the scanner answers {text}");
    }
    // Long deltas, an escape or a multi-byte character at every offset across the word and
    // `memchr` boundaries.
    for at in 0..80 {
        for insert in ["\\\"", "\\u00e9", "é", "\\\\"] {
            let delta = format!("{}{insert}{}", "x".repeat(at), "y".repeat(1000 - at));
            let text =
                format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"{delta}"}}"#);
            assert!(agrees(text.as_bytes()), "the scanner answers a long delta");
            let m = scan(text.as_bytes()).expect("scanned");
            assert_eq!(m.delta.map(|r| r.len()), Some(delta.len() + 2));
        }
    }
}

#[test]
fn leaves_to_serde_what_it_does_not_handle() {
    for text in [
        // A known key twice (serde refuses the borrowing pass: verbatim, unclassified).
        r#"{"type":"TEXT_MESSAGE_CONTENT","type":"RUN_FINISHED"}"#,
        r#"{"delta":null,"delta":"x","type":"TEXT_MESSAGE_CONTENT","messageId":"m"}"#,
        // An escaped top-level key, which serde unescapes and matches.
        r#"{"t\u0079pe":"RUN_FINISHED"}"#,
        // Invalid JSON of many kinds.
        r#"{"type":"X",}"#,
        r#"{"type":"X"} x"#,
        r#"{"type":"X""delta":"y"}"#,
        r#"{"type":01}"#,
        r#"{"type":1.}"#,
        r#"{"type":1e}"#,
        r#"{"type":-}"#,
        r#"{"type":"\x"}"#,
        r#"{"type":"\u12G4"}"#,
        "{\"type\":\"a\u{1}b\"}",
        r#"{"type":tru}"#,
        r#"{"type":[1,]}"#,
        r#"{"type":{"a"}}"#,
        r#"{"type":{"a":1,}}"#,
        r#"{"type":[}"#,
        r#"{"type":"X""#,
        "\u{c}{\"type\":\"X\"}",
        // Control bytes, whitespace or not: serde's to judge.
        "\t\r\n{\"type\":\"STEP_STARTED\"}\n",
        "{\"type\":\t\"STEP_STARTED\"}",
        r#"{1:2}"#,
        "{",
    ] {
        assert!(!agrees(text.as_bytes()), "the scanner leaves {text}");
    }
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
    assert!(!agrees(deep.as_bytes()));
    let nested = format!("{{\"a\":{}{}}}", "[".repeat(120), "]".repeat(120));
    assert!(agrees(nested.as_bytes()));
}

#[test]
fn scans_every_event_of_the_golden_fixtures_as_serde_reads_it() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
    let mut answered = 0;
    for dir in std::fs::read_dir(root).expect("fixtures") {
        let dir = dir.expect("a fixture directory").path();
        for file in std::fs::read_dir(&dir).expect("a fixture directory") {
            let path = file.expect("a fixture").path();
            if path.extension().is_none_or(|e| e != "sse") {
                continue;
            }
            let body = std::fs::read(&path).expect("a fixture");
            let mut out = Vec::new();
            Decoder::new(8 << 20).feed(&Bytes::from(body), &mut out);
            for d in out {
                if let Decoded::Event(e) = d {
                    answered += usize::from(agrees(&one_line(&e.data)));
                }
            }
        }
    }
    assert!(
        answered > 100,
        "the scanner answered {answered} fixture events"
    );
}

/// A JSON value as text, with whitespace from `ws` between its tokens.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        "-?(0|[1-9][0-9]{0,5})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
        "\"([a-zA-Z0-9 é日]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4}){0,12}\"",
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z\\\\\"]{0,4}", inner), 0..4).prop_map(|v| {
                let members: Vec<String> = v
                    .into_iter()
                    .map(|(k, v)| format!("{:?}:{v}", k.replace(['\\', '"'], "")))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// An AG-UI-like object: some of the known members (string-valued mostly), and others.
fn object() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("type"),
        Just("messageId"),
        Just("toolCallId"),
        Just("delta"),
        Just("name"),
        Just("threadId"),
        Just("value"),
    ];
    let ty = prop_oneof![
        Just("\"TEXT_MESSAGE_CONTENT\"".to_string()),
        Just("\"TOOL_CALL_ARGS\"".to_string()),
        Just("\"TEXT_MESSAGE_CHUNK\"".to_string()),
        Just("\"THINKING_TEXT_MESSAGE_CONTENT\"".to_string()),
        Just("\"RUN_FINISHED\"".to_string()),
        value(),
    ];
    (
        prop::collection::vec((key, ty), 0..6),
        prop::sample::select(vec!["", " ", "   "]),
    )
        .prop_map(|(members, ws)| {
            let mut seen = Vec::new();
            let body: Vec<String> = members
                .into_iter()
                .filter(|(k, _)| {
                    let first = !seen.contains(k);
                    seen.push(*k);
                    first
                })
                .map(|(k, v)| format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}"))
                .collect();
            format!("{ws}{{{}}}{ws}", body.join(","))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_scanner_reads_every_valid_object_as_serde_does(text in object()) {
        prop_assert!(agrees(text.as_bytes()), "the scanner answers {}", text);
    }

    #[test]
    fn the_scanner_never_disagrees_on_a_mutated_object(
        text in object(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..4),
    ) {
        let mut bytes = text.into_bytes();
        for (at, byte, op) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => { bytes.remove(i); }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => bytes.push(byte),
            }
        }
        agrees(&bytes);
    }
}

#[test]
fn members_are_found_in_any_order() {
    let data = br#"{"delta":"d","name":"n","toolCallId":"t","messageId":"m","type":"T","x":1}"#;
    let m = scan(data).expect("scanned");
    let text = |r: Option<Range<usize>>| r.map(|r| &data[r]);
    assert_eq!(text(m.ty), Some(&br#""T""#[..]));
    assert_eq!(text(m.message_id), Some(&br#""m""#[..]));
    assert_eq!(text(m.tool_call_id), Some(&br#""t""#[..]));
    assert_eq!(text(m.delta), Some(&br#""d""#[..]));
    assert_eq!(text(m.name), Some(&br#""n""#[..]));
}
