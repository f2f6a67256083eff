//! The follower side: a replica serving a run another replica produces keeps one local mirror
//! run per run, fed by one follower task; every local observer reads the mirror through the
//! unchanged observer code.
//!
//! Handoff without gaps: the follower subscribes to the run's doorbell and waits for the
//! acknowledgement *before* it reads the checkpoint and the stream (every append rings the
//! doorbell, followed or not); the stream decides what exists and the doorbell only wakes (a
//! poll of at most a second covers a lost one). A doorbell carries the entry the producer just
//! appended: the push connection applies it to a mirror it follows on from ([`super::bell`])
//! without waking this task or reading the stream, unless the bell is held (an end was rung, or
//! the push connection was lost: a refused append's doorbell may carry seqs past an end);
//! anything else (an end, a gap, dropped messages, a poll) wakes this task, which reads the
//! stream, and a read that began after a hold releases it. A gap
//! (trim, re-base, Redis restarted) re-seeds the mirror from the latest checkpoint. A run whose
//! producer's lease lapsed is ended `owner_lost` by the first follower that notices; a run the
//! journal no longer has (Redis restarted empty, and no producer wrote it again) is ended
//! `owner_lost` in Redis, first-wins, by the first follower that gives up on it; a mirror whose
//! producer's lease lapsed while Redis refuses writes (`-OOM`) ends `owner_lost` here
//! ([`lost`]).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use log::{debug, info};
use redis::AsyncCommands;
use tokio::time::Instant;

use super::bell::{apply_data, apply_entry, Bell};
use super::codec::{self, Checkpoint};
use super::marks::is_journaled;
use super::{scripts, timed, Replica, RunKeys};
use crate::journal::memory::MemoryJournal;
use crate::journal::Journal;
use crate::record::compact::Compactor;
use crate::state::auth::Owner;
use crate::state::run::Run;
use crate::vocab::end::End;
use crate::vocab::{RunId, Scope};

mod lost;

/// Stream entries read per call.
const COUNT: usize = 1024;

/// See [`Replica::sync_chat`].
pub(super) async fn sync_chat(
    c: &Arc<Replica>,
    scope: &Scope,
    owner: Owner,
    run_id: Option<&RunId>,
) {
    let reg = &c.registry;
    let mut conn = c.conn();
    let cur: Option<String> = match timed(conn.hget(super::chat_key(scope), "run")).await {
        Ok(v) => v,
        Err(e) => {
            debug!("journal lookup failed: {e}");
            return;
        }
    };
    if let Some(cur) = cur.map(RunId::from) {
        let replace = match reg.current(scope, &owner) {
            None => true,
            Some(l) if *l.id() == cur => false,
            Some(l) => l.origin().is_mirror() || (l.end().is_some() && is_journaled(&l)),
        };
        if replace {
            match reg.find(scope, &owner, &cur) {
                // Mirrored by its cursor as an older run, before the chat's pointer named it.
                Some(run) if run.origin().is_mirror() => reg.adopt(scope, owner, run, true),
                Some(_) => {}
                None => {
                    if let Some(run) = mirror(c, scope, owner, &cur).await {
                        reg.adopt(scope, owner, run, true);
                    }
                }
            }
        }
    }
    if let Some(id) = run_id {
        if reg.find(scope, &owner, id).is_none() {
            if let Some(run) = mirror(c, scope, owner, id).await {
                reg.adopt(scope, owner, run, false);
            }
        }
    }
}

/// See [`Replica::sync_id`].
pub(super) async fn sync_id(c: &Arc<Replica>, owner: Owner, id: &RunId) {
    if c.registry.by_id(&owner, id).is_some() {
        return;
    }
    let mut conn = c.conn();
    let v: Option<String> = match timed(conn.get(super::id_key(&owner, id))).await {
        Ok(v) => v,
        Err(_) => return,
    };
    let Some((scope, run_id)) = v.as_deref().and_then(|v| v.split_once('\n')) else {
        return;
    };
    let (scope, run_id) = (Scope::from(scope), RunId::from(run_id));
    sync_chat(c, &scope, owner, Some(&run_id)).await;
    if let Some(run) = c.registry.find(&scope, &owner, &run_id) {
        c.registry.index(&owner, id, &scope, &run);
        if *id != run_id {
            run.set_alias(id);
        }
    }
}

/// The run of the chat at `scope` indexed under `name` for `owner` in the journal, mirrored here
/// (not named by it: `name` is no alias to show).
pub(super) async fn find_named(
    c: &Arc<Replica>,
    scope: &Scope,
    owner: Owner,
    name: &RunId,
) -> Option<Arc<Run>> {
    let mut conn = c.conn();
    let v: Option<String> = timed(conn.get(super::id_key(&owner, name))).await.ok()?;
    let (s, run_id) = v.as_deref()?.split_once('\n')?;
    if s != scope.as_str() {
        return None;
    }
    let run_id = RunId::from(run_id);
    sync_chat(c, scope, owner, Some(&run_id)).await;
    c.registry.find(scope, &owner, &run_id)
}

/// The mirror of run `run_id` of the chat at `scope`: the one this replica has, or a new one
/// with its follower, bound to `owner` (the owner whose scope names the run's keys). `None` when
/// the journal does not know the run in that chat. Mirrors are kept by their chat's keys, so a
/// run id named in another owner's chat never reaches this one.
async fn mirror(c: &Arc<Replica>, scope: &Scope, owner: Owner, run_id: &RunId) -> Option<Arc<Run>> {
    let _one = c.creating.lock().await;
    let keys = RunKeys::new(scope, run_id);
    if let Some(run) = c.mirrors.get(&keys.m).and_then(|w| w.upgrade()) {
        return Some(run);
    }
    let bell = c.subscribe(&keys.bell).await.ok()?;
    let seed = match seed(c, &keys, run_id).await {
        Some(s) => s,
        None => {
            c.unsubscribe(&keys.bell).await;
            return None;
        }
    };
    let journal = Arc::new(seed.journal);
    let run = Arc::new(Run::with_journal(run_id.clone(), Box::new(journal.clone())));
    run.mark_mirror();
    run.bind_owner(owner);
    super::marks::keep_mirror_head(&run, &seed.header);
    if !seed.route.is_empty() {
        run.labels().set_route(&seed.route);
    }
    if let Some(end) = seed.end {
        journal.end(end);
        run.done();
    } else {
        bell.follow_on(Some((journal.clone(), seed.ckpt)));
    }
    c.mirrors.insert(keys.m.clone(), Arc::downgrade(&run));
    info!("run {run_id}: following it from the shared journal");
    let f = Follower {
        c: c.clone(),
        run: Arc::downgrade(&run),
        journal,
        keys,
        ckpt: seed.ckpt,
        missing: 0,
    };
    c.jm.followers.inc();
    tokio::spawn(f.follow(bell, run.end().is_some()));
    Some(run)
}

struct Seed {
    journal: MemoryJournal,
    ckpt: u64,
    end: Option<End>,
    header: String,
    /// The path of the route recording the run (the meta's `extra`).
    route: String,
}

/// One stream entry: its id's seq and kind, and its fields.
type Entry = (String, Vec<Vec<u8>>);

async fn read_entries(c: &Replica, s: &str, after: u64) -> redis::RedisResult<Vec<Entry>> {
    let mut conn = c.conn();
    let mut out: Vec<Entry> = Vec::new();
    let mut from = format!("({after}-0");
    loop {
        let page: Vec<Entry> = timed(
            redis::cmd("XRANGE")
                .arg(s)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(COUNT)
                .query_async(&mut conn),
        )
        .await?;
        let n = page.len();
        if let Some((id, _)) = page.last() {
            from = format!("({id}");
        }
        out.extend(page);
        if n < COUNT {
            return Ok(out);
        }
    }
}

fn field<'a>(fields: &'a [Vec<u8>], name: &[u8]) -> Option<&'a [u8]> {
    fields
        .chunks(2)
        .find(|p| p.first().map(Vec::as_slice) == Some(name))
        .and_then(|p| p.get(1).map(Vec::as_slice))
}

/// What applying entries to a mirror found.
enum Applied {
    /// Entries applied up to the mirror's head.
    More,
    /// The run's end, at the mirror's head.
    End(End),
    /// A gap: the mirror must be re-seeded.
    Gap,
}

/// Applies stream entries in order: a batch only where it follows on (seqs the mirror holds are
/// skipped; one past its head is a gap, never a hole shown), a re-base's marker skipped (the
/// next batch says whether the mirror follows on), the end (at [`scripts::END_ID`], its seq in a
/// field) only at the mirror's head.
fn apply(j: &MemoryJournal, entries: &[Entry], ckpt: u64) -> Applied {
    for (id, fields) in entries {
        if id == scripts::END_ID {
            let seq = field(fields, b"seq").and_then(|s| std::str::from_utf8(s).ok()?.parse().ok());
            let end =
                seq.and_then(|seq| Some((seq, codec::decode_end(field(fields, b"end")?, seq)?)));
            return match end {
                Some((seq, end)) if j.head() == seq => Applied::End(end),
                _ => Applied::Gap,
            };
        }
        if id.ends_with("-1") {
            continue;
        }
        let first: u64 = field(fields, b"f")
            .and_then(|f| std::str::from_utf8(f).ok()?.parse().ok())
            .unwrap_or(0);
        let data = Bytes::copy_from_slice(field(fields, b"d").unwrap_or_default());
        if !apply_data(j, first, data, ckpt) {
            return Applied::Gap;
        }
    }
    Applied::More
}

/// Reads the run's meta, checkpoint and the stream after it into a fresh mirror journal.
///
/// The window before the checkpoint is read too, unless the stream has a hole there (a re-base
/// moved the head past batches it never wrote): then the mirror starts at the checkpoint.
async fn seed(c: &Replica, keys: &RunKeys, run_id: &RunId) -> Option<Seed> {
    let mut conn = c.conn();
    let mut hole = false;
    for _ in 0..3 {
        let meta: HashMap<String, String> = timed(conn.hgetall(&keys.m)).await.ok()?;
        if meta.is_empty() {
            return None;
        }
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let (head, win) = (num("head"), num("win").max(1));
        let ck: Option<Vec<u8>> = timed(conn.get(&keys.k)).await.ok()?;
        let ck = match ck {
            Some(b) => codec::decode_checkpoint(Bytes::from(b))?,
            None => Checkpoint::default(),
        };
        let start = match hole {
            true => ck.seq,
            false => ck.seq.min(head.saturating_sub(win)),
        };
        let entries = read_entries(c, &keys.s, start).await.ok()?;
        let raw_first = entries
            .iter()
            .find_map(|(_, f)| {
                let d = field(f, b"d")?;
                (d.len() >= 12).then(|| u64::from_le_bytes(d[4..12].try_into().unwrap_or([0; 8])))
            })
            .unwrap_or(ck.raw_end);
        // A mirror's window starts where the stream's batches do; its history is the
        // checkpoint's.
        let first = entries
            .iter()
            .find_map(|(_, f)| {
                std::str::from_utf8(field(f, b"f")?)
                    .ok()?
                    .parse::<u64>()
                    .ok()
            })
            .map_or(ck.seq, |f| f.saturating_sub(1).min(ck.seq));
        let j = MemoryJournal::mirror(
            run_id,
            c.window,
            c.raw_cap,
            first,
            Compactor::seeded(&ck.body, ck.events),
            raw_first,
            ck.named,
        );
        match apply(&j, &entries, ck.seq) {
            Applied::Gap => hole = true,
            applied => {
                let end = match applied {
                    Applied::End(e) => Some(e),
                    _ => None,
                };
                return Some(Seed {
                    journal: j,
                    ckpt: ck.seq,
                    end,
                    header: meta.get("header").cloned().unwrap_or_default(),
                    route: meta.get("extra").cloned().unwrap_or_default(),
                });
            }
        }
    }
    None
}

struct Follower {
    c: Arc<Replica>,
    run: Weak<Run>,
    journal: Arc<MemoryJournal>,
    keys: RunKeys,
    ckpt: u64,
    /// Lease checks in a row that found the run missing from the journal.
    missing: u32,
}

impl Follower {
    /// Applies the entries the doorbell carried; false when the stream must be read (a
    /// message without its entry, such as an end, or one that does not follow the mirror).
    fn apply_rung(&self, msgs: Vec<Bytes>) -> bool {
        msgs.iter()
            .all(|m| apply_entry(&self.journal, m, self.ckpt))
    }

    async fn follow(mut self, bell: Arc<Bell>, ended: bool) {
        let mut progress = Instant::now();
        let mut done = ended;
        // A poll only when no doorbell came for a while (one was lost); doorbells the push
        // connection applied itself count as come.
        let poll = tokio::time::sleep(self.c.cfg.poll);
        tokio::pin!(poll);
        while !done {
            let rung = tokio::select! {
                _ = bell.notify.notified() => true,
                _ = &mut poll => false,
            };
            poll.as_mut().reset(Instant::now() + self.c.cfg.poll);
            let Some(run) = self.run.upgrade() else { break };
            if !rung && bell.take_applied() > 0 {
                progress = Instant::now();
                continue;
            }
            let head = self.journal.head();
            // Taken before the read: only a read that began after a hold releases it.
            let hold = bell.hold();
            let (msgs, behind) = bell.take();
            if rung && !behind && hold.is_none() && self.apply_rung(msgs) {
                if self.journal.head() > head {
                    progress = Instant::now();
                }
                continue;
            }
            let entries = match read_entries(&self.c, &self.keys.s, head).await {
                Ok(e) => e,
                Err(_) => continue,
            };
            match apply(&self.journal, &entries, self.ckpt) {
                Applied::End(end) => {
                    self.journal.end(end);
                    run.done();
                    done = true;
                    continue;
                }
                Applied::Gap => {
                    // Doorbells queue for this task until the mirror is whole again.
                    bell.follow_on(None);
                    if let Some(seed) = seed(&self.c, &self.keys, run.id()).await {
                        debug!("run {}: mirror re-seeded", run.id());
                        self.ckpt = seed.ckpt;
                        self.journal.replace_with(seed.journal);
                        if let Some(end) = seed.end {
                            self.journal.end(end);
                            run.done();
                            break;
                        }
                        // A whole mirror from a read after the hold: it may be released.
                        if let Some(g) = hold {
                            bell.release(g);
                        }
                    }
                    bell.follow_on(Some((self.journal.clone(), self.ckpt)));
                }
                Applied::More => {
                    if let Some(g) = hold {
                        bell.release(g);
                    }
                }
            }
            if self.journal.head() > head {
                progress = Instant::now();
            } else if progress.elapsed() >= self.c.cfg.lease {
                if let Some(end) = self.reap_if_lost(run.id()).await {
                    self.journal.end(end);
                    run.done();
                    done = true;
                }
                progress = Instant::now() - self.c.cfg.lease / 2;
            }
        }
        self.c.unsubscribe(&self.keys.bell).await;
        self.c.jm.followers.dec();
    }
}
