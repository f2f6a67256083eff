//! Delivery: the write loops that serve a client from a run, in protocol 1 ([`observer`]) or in
//! the upstream's own format ([`replay`]), or as a Durable Stream ([`durable`]), and the
//! protocol-1 snapshot an observer starts from, cached per seq on the run ([`snapshot`]).

#[cfg(test)]
pub(crate) mod collect;
pub mod durable;
pub mod observer;
pub mod replay;
pub mod snapshot;
