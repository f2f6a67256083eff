//! A sink that keeps everything written to it, for the write loops' unit tests.

use bytes::Bytes;

use crate::deliver::observer::{ClientGone, Sink};

/// Keeps every byte written; its client never goes away.
pub struct Collect(pub Vec<u8>);

impl Sink for Collect {
    async fn send(&mut self, data: Bytes) -> Result<(), ClientGone> {
        self.0.extend_from_slice(&data);
        Ok(())
    }
    async fn closed(&mut self) {
        std::future::pending::<()>().await
    }
}
