//! A follower's end when its mirror stalled for a lease: the producer's lease lapsed (the
//! reaper's `owner_lost`, a CAS on that lease), the journal lost the run (a first-wins
//! `owner_lost`, [`scripts::LOST`]), or the run is ended in Redis with no end its stream can
//! bring to the mirror.

use log::info;

use super::super::{codec, owner_alive, scripts, timed, Conn};
use super::Follower;
use crate::vocab::end::{End, EndReason};
use crate::vocab::RunId;

impl Follower {
    /// Ends the run `owner_lost` when its producer's lease lapsed (a CAS on that lease), and
    /// returns the end the mirror must show when the stream cannot bring it:
    ///
    /// - the journal has not had the run on three checks in a row (half a lease apart, so a
    ///   lease from the first to the last): Redis lost it (restarted empty) and no producer
    ///   wrote it again (a live run's producer re-writes it within a third of a lease of Redis
    ///   answering, and so does one whose end settled within the last lease,
    ///   [`super::super::writer`]). Its `owner_lost` is written first-wins
    ///   ([`scripts::LOST`]): the end the run then has in Redis is shown, this one or the one
    ///   a producer wrote again first;
    /// - the run is ended in Redis by a follower that gave up on it (its `owner_lost` at seq
    ///   0, which a mirror past seq 0 cannot read from the stream): that end;
    /// - the producer's lease lapsed and Redis refuses the end (`-OOM`): `owner_lost`, as its
    ///   producer's replica ends it for its own readers.
    pub(super) async fn reap_if_lost(&mut self, run_id: &RunId) -> Option<End> {
        let mut conn = self.c.conn();
        type Fields = (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let r: redis::RedisResult<Fields> = timed(
            redis::cmd("HMGET")
                .arg(&self.keys.m)
                .arg("state")
                .arg("producer")
                .arg("lease")
                .arg("end")
                .query_async(&mut conn),
        )
        .await;
        let (state, producer, lease) = match r {
            // Written by a follower that gave up on the run (no producer, its end at seq 0):
            // a mirror past seq 0 cannot read that end from the stream. Any other end is read
            // from the stream, or from a re-seed, with every event before it.
            Ok((Some(state), None, _, Some(end))) if state == "ended" => {
                self.missing = 0;
                return codec::decode_end(end.as_bytes(), 0);
            }
            Ok((Some(state), Some(producer), Some(lease), _)) => (state, producer, lease),
            Ok((None, None, None, None)) => {
                self.missing += 1;
                return match self.missing >= 3 {
                    true => self.end_gone(&mut conn, run_id).await,
                    false => None,
                };
            }
            _ => return None,
        };
        self.missing = 0;
        if state != "live"
            || owner_alive(&mut conn, &producer, &lease)
                .await
                .unwrap_or(true)
        {
            return None;
        }
        match self
            .c
            .end_lost(&mut conn, &self.keys, run_id, &producer, &lease)
            .await
        {
            // Redis answers but refuses writes (`-OOM`): a Redis that is down for writing. The
            // producer's liveness lapsed, so its replica ends the run `owner_lost` for its own
            // readers too (and writes that end once Redis takes writes again).
            Err(e) if super::super::refuses_writes(&e) => {
                info!("run {run_id}: its producer's lease lapsed and Redis refuses writes ({e})");
                Some(End::finished(false, Some(EndReason::OwnerLost)))
            }
            _ => None,
        }
    }

    /// The journal lost the run: its `owner_lost` end written first-wins, and the end Redis
    /// then holds (`None` while the run is back live, or Redis does not answer).
    async fn end_gone(&mut self, conn: &mut Conn, run_id: &RunId) -> Option<End> {
        let lost = End::finished(false, Some(EndReason::OwnerLost));
        let r: redis::RedisResult<Vec<Vec<u8>>> = timed(
            scripts::LOST
                .key(&self.keys.m)
                .key(&self.keys.s)
                .arg(run_id.as_str())
                .arg(codec::encode_end(&lost))
                .arg(self.c.retention.as_millis() as u64)
                .arg(&self.keys.bell)
                .arg(self.c.publish_command())
                .invoke_async(conn),
        )
        .await;
        match r {
            Ok(v) => match v.first().map(Vec::as_slice) {
                Some(b"ok") => {
                    info!("run {run_id}: gone from the shared journal; ended as owner_lost");
                    Some(lost)
                }
                Some(b"ended") => v.get(1).and_then(|e| codec::decode_end(e, 0)),
                _ => {
                    self.missing = 0;
                    None
                }
            },
            // Redis lost the run and refuses writes: nothing can be written or come back.
            Err(e) if super::super::refuses_writes(&e) => {
                info!("run {run_id}: gone from the shared journal, which refuses writes ({e})");
                Some(lost)
            }
            Err(_) => None,
        }
    }
}
