//! Ingest: the pure recording rules. Upstream bytes in; classified events out, one batch per
//! upstream read; and at the end, the verdict: whether the answer was persisted, and why not.
//!
//! The producer (`producer.rs`) only reads the socket, feeds [`Ingest`], appends each
//! batch to the run's journal and counts metrics. Everything that decides what a run's end means
//! lives here, unit-tested with byte slices.

use std::sync::Arc;

use bytes::Bytes;

use crate::budget::{Budget, Charge};
use crate::journal::raw::Frame;
use crate::record::format::{detect_from_event, Event, Format, FormatKind};
use crate::record::sse::{Decoded, Decoder};
use crate::record::unique_ids::UniqueIds;
use crate::record::usage::{Meter, UsagePointers};
use crate::settings::Commit;
use crate::vocab::end::RunOutcome;
use crate::vocab::end::{End, EndReason};

/// Events searched for `event:` aliases before giving up on the ones not found.
const ALIAS_SEARCH_EVENTS: u64 = 64;

/// How the upstream read loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The upstream ended its body cleanly.
    Clean,
    /// tether stopped reading (stop route, `max_run_duration`, abandon, shutdown).
    Stopped(EndReason),
    /// The upstream failed mid-answer (`UpstreamReset` or `UpstreamTimeout`).
    Failed(EndReason),
}

/// What one upstream read produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fed {
    /// Sizes of the events dropped for being over the event cap.
    pub oversized: Vec<usize>,
    /// Bytes of an unfinished event dropped because the buffer budget had no room for it.
    pub over_budget: Option<usize>,
}

/// The frames that tell a stopped run's readers it was stopped (see [`Ingest::stop`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopFrames {
    /// The frames' bytes, for a reader of the upstream's own bytes (a legacy requester).
    pub bytes: Bytes,
    /// The upstream stopped between two events, so such a reader can be given these bytes and
    /// a clean end. Otherwise its stream is cut: an event it has begun cannot be ended cleanly.
    pub clean: bool,
}

/// The decided end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the backend's answer counts as saved.
    pub persisted: bool,
    /// Why not, when it does not.
    pub reason: Option<EndReason>,
}

/// The recording rules of one run: decoder, format and commit rule, and what they saw.
#[derive(Debug)]
pub struct Ingest {
    decoder: Decoder,
    format: Option<&'static dyn Format>,
    commit: Commit,
    decoded: Vec<Decoded>,
    saw_finish: bool,
    saw_terminal: bool,
    failure: Option<EndReason>,
    committed: bool,
    events: u64,
    bytes: u64,
    /// Raw frames are kept: the cursor field each frame is indexed by.
    raw: Option<Option<String>>,
    raw_out: Vec<Frame>,
    /// Raw frames get ids unique in the run (`ids = "unique"`).
    unique: Option<UniqueIds>,
    /// `event:` alias pointers not found yet.
    alias_pointers: Vec<String>,
    aliases_found: Vec<String>,
    /// The unfinished event's bytes, held against the buffer budget when one is set.
    held: Option<Charge>,
    /// An event was dropped (over the cap or the budget): the record is not the whole answer.
    lost: bool,
    /// The run's token usage, when metered ([`Self::meter_usage`]).
    meter: Option<Meter>,
}

impl Ingest {
    /// Rules for a run of `format` (`None`: detected from the first event), persisted per
    /// `commit`, dropping events over `max_event`.
    pub fn new(format: Option<&'static dyn Format>, commit: Commit, max_event: usize) -> Self {
        Ingest {
            decoder: Decoder::new(max_event),
            format,
            commit,
            decoded: Vec::new(),
            saw_finish: false,
            saw_terminal: false,
            failure: None,
            committed: false,
            events: 0,
            bytes: 0,
            raw: None,
            raw_out: Vec::new(),
            unique: None,
            alias_pointers: Vec::new(),
            aliases_found: Vec::new(),
            held: None,
            lost: false,
            meter: None,
        }
    }

    /// Also holds the bytes of the event being decoded against `budget`: an event still
    /// arriving when the budget has no room for it is dropped ([`Fed::over_budget`]).
    pub fn with_budget(mut self, budget: &Budget) -> Self {
        self.held = Some(budget.empty());
        self
    }

    /// Also keeps each event's raw frame ([`Self::take_raw`]), indexed by the integer at
    /// `cursor_field` in its JSON when given.
    pub fn keep_raw(mut self, cursor_field: Option<String>) -> Self {
        self.decoder = std::mem::replace(&mut self.decoder, Decoder::new(1)).keep_raw();
        self.raw = Some(cursor_field);
        self
    }

    /// With [`Self::keep_raw`]: each raw frame's id is made unique in the run (see
    /// [`crate::record::unique_ids`]), in its bytes and in the id it is found by.
    pub fn unique_ids(mut self) -> Self {
        self.unique = Some(UniqueIds::new());
        self
    }

    /// Also looks for a string or number at each of these JSON pointers in the first events
    /// ([`Self::take_aliases`]): each pointer's first value is the run's alias.
    pub fn find_aliases(mut self, pointers: Vec<String>) -> Self {
        self.alias_pointers = pointers;
        self
    }

    /// Also reads the token usage the provider's own frames report ([`Self::usage`]), with the
    /// route's `usage` setting for the formats that have no usage event of their own.
    pub fn meter_usage(mut self, pointers: Option<Arc<UsagePointers>>) -> Self {
        self.meter = Some(Meter::new(pointers));
        self
    }

    /// The run's usage meter (usage so far, and at the end the provider's numbers or
    /// `usage_missing`), when [`Self::meter_usage`] turned it on.
    pub fn usage(&self) -> Option<&Meter> {
        self.meter.as_ref()
    }

    /// The raw frames of the last [`Self::feed`], one per event of its batch.
    pub fn take_raw(&mut self) -> Vec<Frame> {
        std::mem::take(&mut self.raw_out)
    }

    /// Aliases found since the last call.
    pub fn take_aliases(&mut self) -> Vec<String> {
        std::mem::take(&mut self.aliases_found)
    }

    /// The run's format, once known.
    pub fn format(&self) -> Option<FormatKind> {
        self.format.map(|f| f.kind())
    }

    /// Decodes one upstream read and classifies its complete events into `batch` (cleared
    /// first).
    pub fn feed(&mut self, chunk: &Bytes, batch: &mut Vec<Event>) -> Fed {
        let mut fed = Fed::default();
        batch.clear();
        self.bytes += chunk.len() as u64;
        self.decoded.clear();
        self.decoder.feed(chunk, &mut self.decoded);
        // One raw frame per decoded event, in order (none unless raw frames are kept).
        let mut raws = self.decoder.take_raw();
        // The format's kind for the usage meter, asked once per read.
        let mut kind = None;
        for d in self.decoded.drain(..) {
            match d {
                Decoded::Event(e) => {
                    if let (Some(field), Some(r)) = (&self.raw, raws.next()) {
                        // The id in an allocation of its own: a slice of the upstream's read
                        // would keep that whole read alive as long as the raw record.
                        let id = e.id.as_deref().map(Bytes::copy_from_slice);
                        let (bytes, id) = match &mut self.unique {
                            Some(u) => u.relay(r.bytes, id),
                            None => (r.bytes, id),
                        };
                        self.raw_out.push(Frame {
                            bytes,
                            id,
                            cursor: field.as_deref().and_then(|f| int_at(&e.data, f)),
                            named: r.named,
                        });
                    }
                    if !self.alias_pointers.is_empty() {
                        if self.events + batch.len() as u64 >= ALIAS_SEARCH_EVENTS {
                            self.alias_pointers.clear();
                        } else {
                            find_aliases(
                                &e.data,
                                &mut self.alias_pointers,
                                &mut self.aliases_found,
                            );
                        }
                    }
                    let format = *self
                        .format
                        .get_or_insert_with(|| detect_from_event(&e).format());
                    let ev = format.classify(&e);
                    self.saw_finish |= ev.finish;
                    self.saw_terminal |= ev.terminal && (self.saw_finish || !format.needs_finish());
                    if self.failure.is_none() {
                        self.failure = ev.failure;
                    }
                    self.committed |= commits(&self.commit, &ev);
                    if let Some(meter) = &mut self.meter {
                        meter.observe(*kind.get_or_insert_with(|| format.kind()), &ev);
                    }
                    batch.push(ev);
                }
                Decoded::Oversized { bytes } => {
                    self.lost = true;
                    fed.oversized.push(bytes);
                }
            }
        }
        drop(raws);
        if let Some(held) = &mut self.held {
            if !held.resize(self.decoder.buffered()) {
                fed.over_budget = self.decoder.discard_partial();
                self.lost |= fed.over_budget.is_some();
                held.resize(self.decoder.buffered());
            }
        }
        self.events += batch.len() as u64;
        fed
    }

    /// Ends a stopped run's record as its format ends a stream its own server stopped
    /// ([`Format::stop_frames`]): an unfinished upstream event is dropped, then the frames are
    /// decoded and classified into `batch` (cleared first), their raw frames kept like the
    /// upstream's ([`Self::take_raw`]); they are not counted as upstream bytes. `None`, with
    /// nothing fed, when the run's format (known by now, or never) has no such frames.
    pub fn stop(&mut self, batch: &mut Vec<Event>) -> Option<StopFrames> {
        let frames = self.format?.stop_frames()?;
        let clean = self.decoder.at_boundary();
        if !clean {
            self.decoder.finish();
        }
        let bytes = Bytes::from_static(frames);
        let upstream = self.bytes;
        self.feed(&bytes, batch);
        self.bytes = upstream;
        Some(StopFrames { bytes, clean })
    }

    /// Ends decoding (nothing is fed after it) and lets the remembered ids go; true when the
    /// upstream stopped inside an event (which is discarded).
    pub fn finish(&mut self) -> bool {
        let pending = self.decoder.finish();
        if let Some(held) = &mut self.held {
            held.resize(0);
        }
        // Nothing more is relayed: the remembered ids go.
        if self.unique.is_some() {
            self.unique = Some(UniqueIds::new());
        }
        pending
    }

    /// Bytes the run's remembered ids hold (`ids = "unique"`; see
    /// [`UniqueIds::held_bytes`]): the producer counts them in the run's recorded bytes.
    pub fn held_bytes(&self) -> usize {
        self.unique.as_ref().map_or(0, UniqueIds::held_bytes)
    }

    /// Events classified so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Upstream body bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// How a body that ended with the connection ended (a close-delimited answer: no length,
    /// no chunking). The close cannot tell a finished answer from a backend that died
    /// mid-answer, so it is a clean end only when the format's terminal event arrived (after
    /// its finish marker where the format has one); otherwise the answer was cut
    /// (`upstream_reset`), whatever the route's `commit`.
    pub fn at_close(&self) -> Ending {
        match self.saw_terminal {
            true => Ending::Clean,
            false => Ending::Failed(EndReason::UpstreamReset),
        }
    }

    /// Whether the run's answer was persisted, and why not. A stop or a failure is never
    /// persisted; a clean end is persisted per the route's `commit` rule (for `eof`: the
    /// format's terminal event arrived, after its finish marker where the format has one, and
    /// no event said the turn failed). A run that lost an event (over the cap or the budget) is
    /// never persisted: its record is not the whole answer (`event_too_large`, unless the
    /// upstream itself said the turn failed).
    pub fn verdict(&self, ending: Ending) -> Verdict {
        let persisted = !self.lost
            && match ending {
                Ending::Clean => match self.commit {
                    Commit::Eof => self.saw_terminal && self.failure.is_none(),
                    Commit::CleanEnd => self.failure.is_none(),
                    Commit::Event { .. } => self.committed,
                },
                // `commit = event:…` counts the committing event even if the upstream then failed.
                Ending::Failed(_) => matches!(self.commit, Commit::Event { .. }) && self.committed,
                Ending::Stopped(_) => false,
            };
        let reason = match (persisted, ending) {
            (true, _) => None,
            (false, Ending::Stopped(r) | Ending::Failed(r)) => Some(r),
            (false, Ending::Clean) => Some(match (&self.commit, self.failure) {
                (Commit::Eof | Commit::CleanEnd, Some(failure)) => failure,
                // The dropped event may have been the terminal or committing one.
                _ if self.lost => EndReason::EventTooLarge,
                (Commit::Eof | Commit::CleanEnd, None) => EndReason::NoTerminalEvent,
                (Commit::Event { .. }, _) => EndReason::NotCommitted,
            }),
        };
        Verdict { persisted, reason }
    }
}

/// The outcome label of a run that ended with `end` after `ending`.
pub fn outcome(end: &End, ending: Ending) -> RunOutcome {
    if end.superseded {
        RunOutcome::Superseded
    } else if end.reason == Some(EndReason::OwnerLost) {
        RunOutcome::OwnerLost
    } else if ending == Ending::Stopped(EndReason::Cancelled) {
        RunOutcome::Cancelled
    } else if end.persisted {
        RunOutcome::Persisted
    } else {
        RunOutcome::NotPersisted
    }
}

/// The integer at `pointer` in the JSON `data`, if it has one. A top-level pointer (`/field`,
/// every cursor profile's) is read without building the document: other members are skipped.
fn int_at(data: &[u8], pointer: &str) -> Option<i64> {
    match pointer.strip_prefix('/') {
        Some(field) if !field.contains(['/', '~']) => top_level_int(data, field),
        _ => {
            let v: serde_json::Value = serde_json::from_slice(data).ok()?;
            v.pointer(pointer)?.as_i64()
        }
    }
}

/// The integer member `field` of the JSON object `data` (the last one if repeated, as
/// `serde_json::Value` keeps it).
fn top_level_int(data: &[u8], field: &str) -> Option<i64> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

    struct Member<'f>(&'f str);

    impl<'de> Visitor<'de> for Member<'_> {
        type Value = Option<i64>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<i64>, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.0 {
                    found = map
                        .next_value::<serde_json::Number>()
                        .ok()
                        .and_then(|n| n.as_i64());
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }

    impl<'de> DeserializeSeed<'de> for Member<'_> {
        type Value = Option<i64>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
            d.deserialize_map(self)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(data);
    let v = Member(field).deserialize(&mut de).ok()?;
    de.end().ok()?;
    v
}

/// Moves every pointer with a string or number in the JSON `data` from `pointers` to `found`.
fn find_aliases(data: &[u8], pointers: &mut Vec<String>, found: &mut Vec<String>) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    pointers.retain(|p| {
        let hit = match v.pointer(p) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        match hit {
            Some(h) => {
                found.push(h);
                false
            }
            None => true,
        }
    });
}

/// Whether `ev` is the event a `commit = event:<TYPE>[:<name>]` route waits for.
fn commits(commit: &Commit, ev: &Event) -> bool {
    match commit {
        Commit::Eof | Commit::CleanEnd => false,
        Commit::Event { ty, name } => {
            ev.ty() == ty.as_bytes() && name.as_ref().is_none_or(|n| ev.name() == n.as_bytes())
        }
    }
}

#[cfg(test)]
mod tests;
