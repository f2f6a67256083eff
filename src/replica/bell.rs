//! A doorbell's wake-up on the follower side ([`Bell`]) and the stream entry a doorbell
//! carries (`<first> <last> <data>`): applied to the mirror where it arrives when it follows on,
//! queued for the follower task otherwise.
//!
//! An append's `PUBLISH` runs even when Redis refused its `XADD` (no script ties them), so a
//! doorbell may carry an entry the stream does not hold: a duplicate (the same producer's same
//! seqs, bytes the stream holds) or seqs past the run's end (an ended or fenced writer's). Three
//! rules keep such a doorbell from reaching a reader (docs/protocol.md, "The journal in Redis"):
//! - Every end is rung (`end`) after it is written, and Redis ran that `PUBLISH` before any
//!   `XADD` it then refused; one subscriber gets a channel's messages in order. So a message
//!   that is not an entry *holds* the bell: nothing is applied where it arrives, nor from the
//!   queue, until the follower has read the stream from a read that began after the hold (and
//!   found no end: a follower that reads the end is done).
//! - After the push connection was lost (or a cluster moved the channel), messages may have
//!   been missed, an end's among them: the bell is held until the first message after it, and
//!   released only by a stream read that began after that message arrived (any end written
//!   before it is in that read; any end written after it is rung after it).
//! - Seqs the mirror holds are skipped, and an entry that does not follow on is never applied
//!   (the follower reads the stream, which never shows a hole).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::codec;
use crate::journal::memory::MemoryJournal;
use crate::journal::Journal;

/// Doorbell messages a follower may have waiting before it reads the stream instead.
const BELL_QUEUE: usize = 256;

/// A subscribed channel's wake-up, with the messages rung since the follower last looked.
///
/// Once its follower has seeded the mirror ([`Bell::follow_on`]), a doorbell that carries the
/// entry following the mirror's head is applied right where it arrives, in the push
/// connection's task, without waking the follower; anything else (an end, a gap, a message while
/// earlier ones wait for the follower) queues for the follower as before.
#[derive(Default)]
pub(crate) struct Bell {
    pub(crate) notify: Notify,
    queue: Mutex<Vec<Bytes>>,
    /// Messages were dropped (queue full, connection lost): the follower reads the stream.
    behind: AtomicBool,
    /// The mirror doorbells are applied to directly, while the follower is not re-seeding it.
    sink: Mutex<Option<Sink>>,
    /// Doorbells applied directly since the follower last looked.
    applied: AtomicU64,
    /// Whether doorbells may be applied before the follower reads the stream again.
    hold: Mutex<Hold>,
}

/// A bell's hold (see the module's rules).
#[derive(Default, Debug, Clone, Copy)]
struct Hold {
    /// Nothing is applied until a stream read that began after hold `gen` was set.
    held: bool,
    /// Messages may have been missed: held from the next message that arrives.
    reconnecting: bool,
    gen: u64,
}

/// Where a [`Bell`] applies the entries it carries: the mirror and its checkpoint's seq.
struct Sink {
    journal: Arc<MemoryJournal>,
    ckpt: u64,
}

impl Bell {
    pub(super) fn ring(&self, msg: Option<Bytes>) {
        let free = {
            let mut h = self.hold.lock();
            match &msg {
                None => h.reconnecting = true,
                Some(m) if h.reconnecting || codec::decode_rung(m).is_none() => {
                    (h.held, h.reconnecting) = (true, false);
                    h.gen += 1;
                }
                Some(_) => {}
            }
            !h.held && !h.reconnecting
        };
        if let Some(m) = msg.as_ref().filter(|_| free) {
            if self.apply(m) {
                return;
            }
        }
        {
            let mut q = self.queue.lock();
            match msg {
                Some(m) if q.len() < BELL_QUEUE => q.push(m),
                _ => {
                    q.clear();
                    self.behind.store(true, Ordering::Relaxed);
                }
            }
        }
        self.notify.notify_one();
    }

    /// Applies a doorbell's entry to the mirror when nothing waits for the follower and the
    /// entry follows on (or is already held); false when the follower must see it.
    fn apply(&self, msg: &Bytes) -> bool {
        let sink = self.sink.lock();
        let Some(s) = sink.as_ref() else {
            return false;
        };
        if self.behind.load(Ordering::Relaxed) || !self.queue.lock().is_empty() {
            return false;
        }
        let ok = apply_entry(&s.journal, msg, s.ckpt);
        if ok {
            self.applied.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Lets doorbells apply to `journal` (seeded from the checkpoint at `ckpt`) directly, or
    /// stops that (`None`) while the follower re-seeds it.
    pub(crate) fn follow_on(&self, to: Option<(Arc<MemoryJournal>, u64)>) {
        *self.sink.lock() = to.map(|(journal, ckpt)| Sink { journal, ckpt });
    }

    /// The messages rung since the last call, and whether some were dropped.
    pub(crate) fn take(&self) -> (Vec<Bytes>, bool) {
        let q = std::mem::take(&mut *self.queue.lock());
        (q, self.behind.swap(false, Ordering::Relaxed))
    }

    /// The hold to release after the next stream read (`None`: doorbells may be applied).
    pub(crate) fn hold(&self) -> Option<u64> {
        let h = *self.hold.lock();
        match (h.held, h.reconnecting) {
            (false, false) => None,
            // Not releasable: the first message after the reconnect sets a newer hold.
            (_, true) => Some(u64::MAX),
            (true, false) => Some(h.gen),
        }
    }

    /// A stream read that began after hold `gen` found the run live and the mirror whole:
    /// doorbells may be applied again, unless a newer hold came meanwhile.
    pub(crate) fn release(&self, gen: u64) {
        let mut h = self.hold.lock();
        if h.held && !h.reconnecting && h.gen == gen {
            h.held = false;
        }
    }

    /// How many doorbells were applied directly since the last call.
    pub(crate) fn take_applied(&self) -> u64 {
        self.applied.swap(0, Ordering::Relaxed)
    }
}

/// Applies the entry a doorbell carried to the mirror `j` (seeded from the checkpoint at
/// `ckpt`); true when it is applied or already held, false when the stream must be read (a
/// message without its entry, such as an end, one past the mirror's head, a bad entry).
pub(super) fn apply_entry(j: &MemoryJournal, msg: &Bytes, ckpt: u64) -> bool {
    let Some(codec::Rung { first, last, data }) = codec::decode_rung(msg) else {
        return false;
    };
    let head = j.head();
    last <= head || (first <= head + 1 && apply_data(j, first, data, ckpt))
}

/// Applies one entry's data (batches from seq `first`); false on a gap or a bad entry.
pub(super) fn apply_data(j: &MemoryJournal, first: u64, mut data: Bytes, ckpt: u64) -> bool {
    let mut at = first;
    loop {
        let b = match codec::next_batch(&mut data) {
            Ok(Some(b)) => b,
            Ok(None) => return true,
            Err(codec::Malformed) => return false,
        };
        let n = b.events.len() as u64;
        if j.append_at(at, &b.events, b.raw, b.raw_first, ckpt)
            .is_err()
        {
            return false;
        }
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::compact::Compactor;
    use crate::record::format::Event;
    use crate::replica::codec;
    use crate::vocab::RunId;
    use bytes::BytesMut;

    /// A doorbell carrying `n` events from seq `first`, as the append script rings it.
    fn entry(first: u64, n: u64) -> Bytes {
        let events: Vec<Event> = (0..n)
            .map(|i| Event::verbatim(Bytes::from(format!("{{\"i\":{}}}", first + i)), 0..0, 0..0))
            .collect();
        let mut batch = BytesMut::new();
        codec::encode_batch(&mut batch, &events, 0, &[]);
        let mut msg = BytesMut::from(format!("{first} {} ", first + n - 1).as_bytes());
        msg.extend_from_slice(&(batch.len() as u32).to_le_bytes());
        msg.extend_from_slice(&batch);
        msg.freeze()
    }

    #[test]
    fn an_entry_that_follows_on_is_applied_where_it_arrives_and_a_gap_waits_for_the_follower() {
        let j = Arc::new(MemoryJournal::mirror(
            &RunId::from("r"),
            100,
            None,
            0,
            Compactor::new(),
            0,
            false,
        ));
        let bell = Bell::default();
        bell.ring(Some(entry(1, 2)));
        assert_eq!(
            (j.head(), bell.take().0.len()),
            (0, 1),
            "no mirror yet: queued"
        );
        bell.follow_on(Some((j.clone(), 0)));
        bell.ring(Some(entry(1, 2)));
        bell.ring(Some(entry(3, 1)));
        bell.ring(Some(entry(2, 2)));
        assert_eq!(j.head(), 3);
        assert_eq!((bell.take().0.len(), bell.take_applied()), (0, 3));
        bell.ring(Some(entry(6, 1)));
        bell.ring(Some(entry(4, 1)));
        assert_eq!(
            j.head(),
            3,
            "a gap, and what comes after it, waits for the follower"
        );
        assert_eq!(bell.take().0.len(), 2);
        bell.ring(Some(Bytes::from_static(b"end")));
        assert_eq!(bell.take().0.len(), 1);
    }

    fn mirror() -> Arc<MemoryJournal> {
        Arc::new(MemoryJournal::mirror(
            &RunId::from("r"),
            100,
            None,
            0,
            Compactor::new(),
            0,
            false,
        ))
    }

    #[test]
    fn after_an_end_is_rung_no_entry_is_applied_until_the_stream_was_read_after_it() {
        let j = mirror();
        let bell = Bell::default();
        bell.follow_on(Some((j.clone(), 0)));
        bell.ring(Some(entry(1, 2)));
        assert_eq!(
            (j.head(), bell.hold()),
            (2, None),
            "applied where it arrives"
        );
        // The end; then a refused append's doorbell (seqs past that end), after the follower
        // took the queue to read the stream.
        bell.ring(Some(Bytes::from_static(b"end")));
        let hold = bell.hold();
        assert!(hold.is_some(), "an end holds the bell");
        assert_eq!(bell.take().0.len(), 1);
        bell.ring(Some(entry(3, 1)));
        assert_eq!(j.head(), 2, "nothing past an end the follower has not read");
        assert_eq!(
            bell.take().0.len(),
            1,
            "queued for the follower, which reads the stream"
        );
        // A read that began before the hold does not release it; one after it does.
        bell.release(hold.unwrap() - 1);
        assert!(bell.hold().is_some());
        bell.release(hold.unwrap());
        bell.ring(Some(entry(3, 1)));
        assert_eq!((j.head(), bell.hold()), (3, None));
    }

    #[test]
    fn after_a_reconnect_the_bell_is_held_until_a_read_after_the_first_message() {
        let j = mirror();
        let bell = Bell::default();
        bell.follow_on(Some((j.clone(), 0)));
        bell.ring(None);
        // Read before any message came back: an end rung meanwhile may be missing from it.
        let before = bell.hold();
        assert!(before.is_some());
        let _ = bell.take();
        bell.release(before.unwrap());
        bell.ring(Some(entry(1, 1)));
        assert_eq!(
            j.head(),
            0,
            "the first message after a reconnect is not applied"
        );
        let after = bell.hold();
        assert_ne!(after, before);
        let _ = bell.take();
        bell.release(before.unwrap());
        assert_eq!(
            bell.hold(),
            after,
            "only a read after that message releases"
        );
        bell.release(after.unwrap());
        bell.ring(Some(entry(1, 2)));
        assert_eq!(j.head(), 2);
    }

    #[test]
    fn a_doorbell_carries_its_entry_and_an_end_or_old_doorbell_does_not() {
        let msg = Bytes::from_static(b"7 9 a b\x00c");
        let r = codec::decode_rung(&msg).unwrap();
        assert_eq!((r.first, r.last, &r.data[..]), (7, 9, &b"a b\x00c"[..]));
        assert_eq!(codec::encode_rung(&r), msg);
        assert!(codec::decode_rung(&Bytes::from_static(b"end")).is_none());
        assert!(codec::decode_rung(&Bytes::from_static(b"42")).is_none());
        assert!(codec::decode_rung(&Bytes::from_static(b"x 9 d")).is_none());
        assert!(codec::decode_rung(&Bytes::from_static(b"+1 9 d")).is_none());
    }
}
