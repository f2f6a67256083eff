//! Sinks for the write loops' unit tests: one that keeps everything written to it, one that
//! tags each write with its reader.

use bytes::Bytes;
use tokio::sync::mpsc;

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

/// Sends every write, tagged with its reader's name, to a channel shared by several readers (so
/// the order of their writes shows); its client goes away when the channel closes.
pub struct Tagged {
    pub tag: &'static str,
    pub tx: mpsc::UnboundedSender<(&'static str, Bytes)>,
}

impl Sink for Tagged {
    async fn send(&mut self, data: Bytes) -> Result<(), ClientGone> {
        self.tx.send((self.tag, data)).map_err(|_| ClientGone)
    }
    async fn closed(&mut self) {
        std::future::pending::<()>().await
    }
}
