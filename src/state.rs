//! State: callers and chat scopes ([`auth`]), resume tokens ([`token`]), a run's local handle
//! ([`run`]), chats and runs with supersession, retention and fair eviction ([`registry`], where
//! every lookup checks the owner), the attach table ([`attach_policy`]), and the per-owner
//! limits on record requests ([`owner_limits`]).

pub mod attach_policy;
pub mod auth;
pub mod owner_limits;
pub mod registry;
pub mod run;
pub mod token;
