//! Stream formats end to end: golden fixtures per format (`tests/fixtures/<format>/*.sse`), the
//! recovery invariant over random event sequences and chunk splits, and a client killed mid-turn
//! that recovers the whole answer through `/chat/live`. Each format is one module; the shared
//! harness is `common`.

pub(crate) mod common;

mod agui;
mod ai_sdk;
mod anthropic;
mod openai_chat;
mod openai_responses;
