//! Fuzzes the AG-UI scanner (`tether_core::record::format::agui::scan`) against `serde_json`, its
//! reference (`agui::members_by_serde`): wherever the scanner answers on UTF-8 text, `serde_json`
//! must accept the text and borrow the same five members (`type`, `messageId`, `toolCallId`,
//! `delta`, `name`) at the same spans. Where it does not answer, the classifier asks `serde_json`
//! itself, so nothing is checked. The AG-UI classifier must also take the input as an event.
//!
//! Input: the `data` of one SSE event.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tether_core::record::format::agui::{self, scan};
use tether_core::record::format::Format;
use tether_core::record::sse::SseEvent;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(members) = scan::scan(data) {
            assert_eq!(
                agui::members_by_serde(text).ok(),
                Some(members),
                "the scanner and serde_json disagree on {text:?}"
            );
        }
    }
    let sse = SseEvent {
        event: None,
        data: Bytes::copy_from_slice(data),
        id: None,
    };
    let _ = agui::Agui.classify(&sse);
});
