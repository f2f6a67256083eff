//! The drop-in profiles end to end (`docs/dialects.md`): for each client family, the real
//! sidecar in front of a scripted backend of that family that implements only the turn, and the
//! client reconnecting exactly as its own library does. One module per family; the shared
//! harness is `common`.

mod common;

mod ai_sdk;
mod aliases;
mod counts;
mod durable_streams;
mod eventsource;
mod igraph;
mod langgraph;
mod openai_responses;
mod preview_agents;
mod stops;
mod workflows;
