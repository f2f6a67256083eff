//! AG-UI: text, reasoning and tool-argument deltas merge by id; everything else is verbatim.

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};
use tether::record::format::{FormatChoice, FormatKind};

use crate::formats::common::*;

const F: FormatKind = FormatKind::Agui;

/// The harness's AG-UI reducer: text, reasoning and arguments per id; every other event in
/// order.
type Agui = crate::support::Reduced;

impl Reducer for Agui {
    fn apply(&mut self, e: &Value) {
        Agui::apply(self, e)
    }

    fn to_json(&self) -> Value {
        json!({"text": self.text, "reasoning": self.reasoning, "args": self.args, "others": self.others})
    }
}

#[test]
fn the_fixture_reduces_to_its_golden_state_from_the_stream_and_from_the_snapshot() {
    let bytes = fixture(F, "tool_call_and_text");
    let (run, ingest, _) = record(FormatChoice::Auto, &[bytes]);
    assert_eq!(ingest.format(), Some(F), "detected from the first event");
    let golden = golden(F, "tool_call_and_text");
    assert_eq!(Agui::of(&events_after(&run, 0)).to_json(), golden);
    let (_, snap, _) = snapshot(&run);
    assert_eq!(Agui::of(&snap).to_json(), golden);
    // 29 events; the 16 deltas compact into 4.
    assert_eq!(snap.len(), 29 - 16 + 4);
}

#[test]
fn the_fixture_recovers_at_every_read_boundary_of_a_byte_by_byte_split() {
    let bytes = fixture(F, "tool_call_and_text");
    let cuts: Vec<usize> = (1..bytes.len()).step_by(7).collect();
    check_recovery::<Agui>(F, &bytes, &cuts);
}

fn arb_event() -> impl Strategy<Value = Value> {
    let text = "[a-z \u{e9}\u{1F600}\"\\\\\n]{0,6}";
    let id = prop_oneof![Just("m1"), Just("m2")];
    prop_oneof![
        (id.clone(), text)
            .prop_map(|(m, d)| json!({"type":"TEXT_MESSAGE_CONTENT","messageId":m,"delta":d})),
        (id.clone(), text)
            .prop_map(|(m, d)| json!({"type":"REASONING_MESSAGE_CONTENT","messageId":m,"delta":d})),
        text.prop_map(|d| json!({"type":"TOOL_CALL_ARGS","toolCallId":"t1","delta":d})),
        id.prop_map(|m| json!({"type":"TEXT_MESSAGE_END","messageId":m})),
        Just(json!({"type":"STEP_STARTED","stepName":"s"})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_sequence_split_anywhere_recovers_from_every_snapshot(
        events in proptest::collection::vec(arb_event(), 0..24),
        cuts in proptest::collection::vec(0usize..2000, 0..12),
    ) {
        let mut bytes = String::new();
        for e in &events {
            bytes.push_str(&format!("data: {e}\n\n"));
        }
        let bytes = Bytes::from(bytes);
        let cuts = cuts_within(cuts, bytes.len());
        let full = check_recovery::<Agui>(F, &bytes, &cuts);
        prop_assert_eq!(full, Agui::of(&events));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_turn_recovers_the_whole_answer_compactly() {
    let golden = golden(F, "tool_call_and_text");
    for cut in [0, 1, 6, 20, 29] {
        let expect = Expect {
            persisted: true,
            reason: None,
        };
        let (r, size) =
            kill_and_recover::<Agui>(F, "tool_call_and_text", vec![], cut, expect).await;
        assert_eq!(r.to_json(), golden, "cut after {cut} events");
        assert!(size < 2200, "snapshot of {size} bytes");
    }
}
