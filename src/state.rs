//! State: callers and chat scopes ([`auth`]), resume tokens ([`token`]), a run's local handle
//! ([`run`]), chats and runs with supersession, retention and fair eviction ([`registry`], where
//! every lookup checks the owner), and the attach table ([`attach_policy`]).

pub mod attach_policy;
pub mod auth;
pub mod registry;
pub mod run;
pub mod token;
