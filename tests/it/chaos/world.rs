//! What every task of the checker shares: the seed and the bounds, the fault clock (which
//! waits a fault excuses), the runs seen per turn, the backend's request count per turn, the
//! counts and the violations. Also the answers: deterministic from (seed, owner, chat, turn),
//! every event marked with its owner, chat, turn, generation and index.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::support::Reduced;

/// The journal's lease and poll (`support::journal_table`), and the heartbeat the replicas run.
pub const LEASE: Duration = Duration::from_secs(1);
pub const POLL: Duration = Duration::from_millis(100);
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// Added to lease + poll + heartbeat for the hang bound: the 2-core machine runs the rest of the
/// suite (and other builds) beside this test, a debug build, and a fault just healed leaves
/// Redis calls and reconnects to finish. A run that is really stuck stays stuck far longer.
pub const MARGIN: Duration = Duration::from_secs(4);
/// A client gives up on a connection that sent no byte, not even a keepalive, for this long
/// while a fault is active (a stopped replica), and reconnects elsewhere.
pub const SILENCE: Duration = Duration::from_secs(2);

/// The replicas' names (and journal ids): two in-process, the last one the binary.
pub const NAMES: [&str; 3] = ["a", "b", "c"];

/// A turn: owner, chat, turn number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Turn {
    pub owner: &'static str,
    pub chat: String,
    pub n: u32,
}

impl Turn {
    /// The marker of this turn's events: `owner/chat/turn`.
    pub fn mark(&self) -> String {
        format!("{}/{}/{}", self.owner, self.chat, self.n)
    }
}

/// 64 bits from the seed and some words (FNV-1a, then splitmix64): stable across runs and
/// platforms, so a seed names the same answers, schedule and cut points everywhere.
pub fn mix(seed: u64, parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A generator seeded from the seed and some words.
pub fn rng(seed: u64, parts: &[&str]) -> StdRng {
    StdRng::seed_from_u64(mix(seed, parts))
}

/// The backend's answer to `turn` as its `gen`-th request of that turn: the events and the
/// pause before each. AG-UI: a text message whose deltas are `owner/chat/turn/g<gen>/<i>;`,
/// sometimes a tool call; every other event carries its marker in `m`.
pub fn answer(seed: u64, turn: &Turn, gen: u32) -> (Vec<Value>, Vec<Duration>) {
    let n_s = turn.n.to_string();
    let mut r = rng(seed, &["answer", turn.owner, &turn.chat, &n_s]);
    let mark = turn.mark();
    let tag = |i: usize| format!("{mark}/g{gen}/{i}");
    let deltas = r.gen_range(6..30);
    let tool = r.gen_bool(0.3).then(|| r.gen_range(0..deltas));
    let thread = format!("{}/{}", turn.owner, turn.chat);
    let mut events = vec![
        json!({"type":"RUN_STARTED","threadId":thread,"runId":mark,"m":tag(0)}),
        json!({"type":"TEXT_MESSAGE_START","messageId":mark,"role":"assistant","m":tag(1)}),
    ];
    for i in 0..deltas {
        if tool == Some(i) {
            let id = format!("{mark}/tool");
            let k = events.len();
            events.push(
                json!({"type":"TOOL_CALL_START","toolCallId":id,"toolCallName":"f","m":tag(k)}),
            );
            events.push(
                json!({"type":"TOOL_CALL_ARGS","toolCallId":id,"delta":format!("{};", tag(k + 1))}),
            );
            events.push(
                json!({"type":"TOOL_CALL_ARGS","toolCallId":id,"delta":format!("{};", tag(k + 2))}),
            );
            events.push(json!({"type":"TOOL_CALL_END","toolCallId":id,"m":tag(k + 3)}));
        }
        let k = events.len();
        events.push(
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":mark,"delta":format!("{};", tag(k))}),
        );
    }
    let k = events.len();
    events.push(json!({"type":"TEXT_MESSAGE_END","messageId":mark,"m":tag(k)}));
    events.push(json!({"type":"RUN_FINISHED","threadId":thread,"runId":mark,"m":tag(k + 1)}));
    // Mostly quick tokens, now and then a longer think; well under the hang bound.
    let pauses = events
        .iter()
        .map(|_| match r.gen_bool(0.05) {
            true => Duration::from_millis(r.gen_range(150..400)),
            false => Duration::from_millis(r.gen_range(5..60)),
        })
        .collect();
    (events, pauses)
}

/// Every marker in a reduced state (deltas split at `;`, the `m` of the other events).
fn marks(state: &Reduced) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for text in state.text.values().chain(state.args.values()) {
        out.extend(text.split_terminator(';').map(str::to_string));
    }
    for e in &state.others {
        if let Some(m) = e["m"].as_str() {
            out.push(m.to_string());
        }
    }
    out
}

/// Why `state` is not `want` (the answer's prefix an observer should hold): the first foreign,
/// second-generation, duplicate or missing event found by its marker, else the difference.
pub fn diagnose(turn: &Turn, state: &Reduced, want: &Reduced) -> String {
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    for m in marks(state) {
        let parts: Vec<&str> = m.split('/').collect();
        let [owner, chat, n, gen, i] = parts[..] else {
            return format!("an event with a malformed marker {m:?}");
        };
        if owner != turn.owner {
            return format!("another owner's event ({m})");
        }
        if chat != turn.chat {
            return format!("another chat's event ({m})");
        }
        if n != turn.n.to_string() {
            return format!("another turn's event ({m})");
        }
        if gen != "g1" {
            return format!("an event of a second generation of the turn ({m})");
        }
        *seen.entry(i.parse().unwrap_or(usize::MAX)).or_default() += 1;
    }
    if let Some((i, _)) = seen.iter().find(|(_, n)| **n > 1) {
        return format!("a duplicate event (index {i} applied twice)");
    }
    let expected: usize = marks(want).len();
    if let Some(i) = (0..expected).find(|i| !seen.contains_key(i)) {
        return format!("a gap (event index {i} missing)");
    }
    // Where the two first differ, with some context either side (the whole states are long).
    let (got, wanted): (Vec<char>, Vec<char>) = (
        format!("{state:?}").chars().collect(),
        format!("{want:?}").chars().collect(),
    );
    let at = got
        .iter()
        .zip(&wanted)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(wanted.len()));
    let show = |c: &[char]| -> String {
        let from = at.saturating_sub(200);
        let to = (at + 300).min(c.len());
        c[from.min(to)..to].iter().collect()
    };
    format!(
        "the state differs at character {at} (of {} and {}): got …{}…, want …{}…",
        got.len(),
        wanted.len(),
        show(&got),
        show(&wanted)
    )
}

/// Which faults excuse a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Any fault: a replica reading Redis, or reached through it.
    Any = 0,
    /// Only a stopped replica or a reset backend link: a wait on a run's producer for its own
    /// stream (or its record request), which never waits for Redis.
    Local = 1,
}

/// Faults in progress and when the last one healed (the start, before any).
struct Faults {
    active: AtomicUsize,
    last_heal: Mutex<Instant>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            active: AtomicUsize::new(0),
            last_heal: Mutex::new(Instant::now()),
        }
    }
}

impl Faults {
    fn begin(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
    }

    fn heal(&self) {
        *self.last_heal.lock() = Instant::now();
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The run of each turn (and when an observer learned it), and the turn of each run.
type Runs = (HashMap<Turn, (String, Instant)>, HashMap<String, Turn>);

/// The checker's shared state.
pub struct World {
    pub seed: u64,
    started: Instant,
    /// lease + poll + heartbeat + margin: how long a healthy system may leave an observer
    /// without its next frame.
    pub bound: Duration,
    /// Every fault, and the faults that can stall a producer's own stream.
    faults: [Faults; 2],
    /// When Redis was restarted empty.
    restarts: Mutex<Vec<Instant>>,
    /// Turns whose record request is live on each replica (the schedule aims faults at them).
    pub live: [AtomicUsize; 3],
    /// The run of each turn (and when an observer learned it), and the turn of each run.
    runs: Mutex<Runs>,
    /// The replica whose record request started each run.
    pub producers: Mutex<HashMap<String, usize>>,
    /// Every observer's end label per turn (to spot replicas that disagree on a run's end).
    ends: Mutex<HashMap<Turn, Vec<String>>>,
    /// Requests the backend got per turn.
    pub gens: Mutex<HashMap<Turn, u32>>,
    counts: Mutex<BTreeMap<String, u64>>,
    violations: Mutex<Vec<String>>,
}

impl World {
    pub fn new(seed: u64) -> Self {
        World {
            seed,
            started: Instant::now(),
            bound: LEASE + POLL + HEARTBEAT + MARGIN,
            faults: [Faults::default(), Faults::default()],
            restarts: Mutex::new(Vec::new()),
            live: Default::default(),
            runs: Mutex::new(Default::default()),
            ends: Mutex::new(HashMap::new()),
            producers: Mutex::new(HashMap::new()),
            gens: Mutex::new(HashMap::new()),
            counts: Mutex::new(BTreeMap::new()),
            violations: Mutex::new(Vec::new()),
        }
    }

    /// Time since the checker started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// A fault of `kind` begins (counted); every wait is excused until it heals, and a wait
    /// on a producer's own stream too when the fault is `local` (it stops the replica or cuts
    /// its backend: Redis faults never stall a producer's stream, docs/protocol.md 2.1).
    pub fn fault_begins(&self, kind: &str, local: bool) {
        self.count(&format!("fault.{kind}"));
        self.faults[0].begin();
        if local {
            self.faults[1].begin();
        }
    }

    /// The fault healed: the hang bound runs again from now.
    pub fn fault_heals(&self) {
        self.faults[0].heal();
        if self.faults[1].active.load(Ordering::SeqCst) > 0 {
            self.faults[1].heal();
        }
    }

    /// Redis was restarted empty (runs it held may be gone).
    pub fn restarted(&self) {
        self.restarts.lock().push(Instant::now());
    }

    /// Whether Redis was restarted empty after `t`.
    pub fn restarted_since(&self, t: Instant) -> bool {
        self.restarts.lock().iter().any(|r| *r >= t)
    }

    /// Whether a fault (of `scope`) is active now or healed after `t`.
    pub fn fault_since(&self, t: Instant, scope: Scope) -> bool {
        let f = &self.faults[scope as usize];
        f.active.load(Ordering::SeqCst) > 0 || *f.last_heal.lock() >= t
    }

    /// Time since the last fault healed.
    pub fn since_heal(&self) -> Duration {
        self.faults[0].last_heal.lock().elapsed()
    }

    /// Whether the system may still be settling at `t`: a fault is active, or one healed less
    /// than the hang bound before `t` (replicas reconnect, re-base and re-seed meanwhile).
    pub fn settling(&self, t: Instant) -> bool {
        let f = &self.faults[0];
        f.active.load(Ordering::SeqCst) > 0 || *f.last_heal.lock() + self.bound >= t
    }

    /// Whether a wait for progress since `since` is a hang: no fault (of `scope`) active, and
    /// the bound passed both since `since` and since the last such fault healed.
    pub fn overdue(&self, since: Instant, scope: Scope) -> bool {
        let f = &self.faults[scope as usize];
        if f.active.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let from = since.max(*f.last_heal.lock());
        from.elapsed() >= self.bound
    }

    /// Adds one to a count.
    pub fn count(&self, what: &str) {
        self.add(what, 1);
    }

    pub fn add(&self, what: &str, n: u64) {
        *self.counts.lock().entry(what.to_string()).or_default() += n;
    }

    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.lock().clone()
    }

    /// Records a violation (with the seed that reruns it).
    pub fn violation(&self, what: String) {
        let line = format!("[SEED={}] {what}", self.seed);
        eprintln!("chaos violation: {line}");
        self.violations.lock().push(line);
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().clone()
    }

    /// Binds `run` to `turn`; a violation when the turn already has another run, or the run
    /// another turn.
    pub fn bind_run(&self, turn: &Turn, run: &str) -> bool {
        let mut g = self.runs.lock();
        let (by_turn, by_run) = &mut *g;
        if let Some((other, _)) = by_turn.get(turn).filter(|(r, _)| r != run) {
            let other = other.clone();
            drop(g);
            self.violation(format!(
                "turn {} has two runs: {other} and {run} (a second generation)",
                turn.mark()
            ));
            return false;
        }
        if let Some(t) = by_run.get(run).filter(|t| *t != turn) {
            let t = t.mark();
            drop(g);
            self.violation(format!(
                "run {run} serves two turns: {t} and {}",
                turn.mark()
            ));
            return false;
        }
        by_turn
            .entry(turn.clone())
            .or_insert_with(|| (run.to_string(), Instant::now()));
        by_run.insert(run.to_string(), turn.clone());
        true
    }

    /// The turn a run serves, when some observer bound it.
    pub fn turn_of(&self, run: &str) -> Option<Turn> {
        self.runs.lock().1.get(run).cloned()
    }

    /// Whether a later turn of the chat has a run: the turn's run is no longer the chat's
    /// current one, so a replica may answer its cursor with the current run's replacement
    /// snapshot (docs/protocol.md 4: only the current run and the runs it superseded are held).
    pub fn later_run(&self, turn: &Turn) -> bool {
        self.runs
            .lock()
            .0
            .keys()
            .any(|t| t.owner == turn.owner && t.chat == turn.chat && t.n > turn.n)
    }

    /// When the run of `turn` was first learned.
    pub fn live_at(&self, turn: &Turn) -> Option<Instant> {
        self.runs.lock().0.get(turn).map(|(_, t)| *t)
    }

    /// Notes how one observer of `turn` saw its end.
    pub fn end_seen(&self, turn: &Turn, label: &str) {
        self.ends
            .lock()
            .entry(turn.clone())
            .or_default()
            .push(label.to_string());
    }

    /// The turns whose observers saw different explicit ends, with what they saw.
    pub fn split_ends(&self) -> Vec<(Turn, Vec<String>)> {
        let mut v: Vec<_> = self
            .ends
            .lock()
            .iter()
            .filter_map(|(t, labels)| {
                let mut kinds: Vec<String> = labels
                    .iter()
                    .filter(|l| l.starts_with("persisted") || l.starts_with("not_persisted"))
                    .cloned()
                    .collect();
                kinds.sort();
                kinds.dedup();
                (kinds.len() > 1).then(|| (t.clone(), kinds))
            })
            .collect();
        v.sort();
        v
    }
}
