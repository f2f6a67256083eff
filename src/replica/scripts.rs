//! The Lua scripts behind every state change of a run in Redis except its appends (a pipelined
//! `XADD` + `PUBLISH`, [`super::pipe::lane`]; [`REFUSED`] is their rare path), the per-owner
//! rate limit's shared bucket ([`TAKE_RUN`], under the owner's own hash tag), the admin API's
//! indexes ([`INDEX`]) and the owners' shared places under the active-runs limit
//! ([`ADMIT_ACTIVE`]). Each takes all its keys in `KEYS`, all under one chat's hash tag,
//! validates everything before its first write (Redis does not roll a script back), and compares
//! the producer's lease token (fencing). The first end written wins. A script that rings a
//! doorbell takes the publish command last (`PUBLISH`, or `SPUBLISH` in a Redis Cluster: the
//! doorbell shares its run's hash tag, so the script stays on one slot).
//!
//! The stream (docs/protocol.md, "The journal in Redis"): a batch of seqs `first..=last` is entry
//! `<last>-0` (fields `f` = first, `d` = data); a go-live or re-base at head `h` writes the marker
//! `<h>-1` (field `base`), so appends continue above it; the end is the entry at the highest id a
//! stream can hold, [`END_ID`] (fields `end` = its JSON, `seq` = its seq), so Redis itself refuses
//! every later `XADD`: that is the fencing of an ended run's writer. The run's head is the
//! stream's top (its id's first part); nothing reads or writes the meta per append. The meta's
//! `head` is refreshed by the lease tick ([`TOUCH`]) and at the end, for the admin API only.
//!
//! Meta hash fields: `state` (`live`|`ended`), `run`, `scope`, `producer`, `lease`, `head`,
//! `ckpt`, `gen`, `win`, `producing`, `stop`, `end` (JSON), `end_seq`, `header`, `extra` (the
//! path of the route recording it), `t` (when its turn's request arrived, ms since the Unix
//! epoch on its producer's clock). Chat hash fields: `run` (the chat's current run) and its `t`.

use std::sync::LazyLock;

use redis::Script;

/// The stream id of a run's end: the highest a stream can hold, so no `XADD` lands after it.
pub const END_ID: &str = "18446744073709551615-0";

/// Lua helpers of the scripts that read a run's stream: `top(s)` is the stream's head seq (nil
/// when the stream is empty or missing), its top entry's kind (0: a batch, 1: a re-base marker)
/// and the end entry's fields when the stream is ended; `field(f, name)` reads one field of an
/// entry; `added(s)` is how many entries were ever added to the stream (Redis 7's
/// `entries-added`, which trimming does not lower and a restore from older data does; 0 when the
/// stream is missing, -1 when this Redis does not say).
macro_rules! lua_stream {
    () => {
        r#"
local END_ID = '18446744073709551615-0'
local function field(f, name)
  for i = 1, #f, 2 do if f[i] == name then return f[i + 1] end end
  return nil
end
local function top(s)
  local e = redis.call('XREVRANGE', s, '+', '-', 'COUNT', 1)[1]
  if not e then return nil, nil, nil end
  if e[1] == END_ID then return nil, nil, e[2] end
  local t, kind = string.match(e[1], '^(%d+)-(%d+)$')
  return tonumber(t), tonumber(kind), nil
end
local function added(s)
  if redis.call('EXISTS', s) == 0 then return 0 end
  return tonumber(field(redis.call('XINFO', 'STREAM', s), 'entries-added') or -1)
end
"#
    };
}

/// Makes a run live at head `seq` (0 at go-live; the local head at a re-base), writing the
/// checkpoint when given, and points the chat at it. The stream gets the marker `<seq>-1` (made
/// when missing) unless its top is already there, so the producer's appends continue above it.
/// A chat's runs are ordered by when their requests arrived, as stamped by their producers'
/// clocks (the chat hash's `t`): a run never supersedes one whose request came after its own.
/// Such an older run (its go-live reached Redis late) is written live but leaves the chat's
/// pointer alone (`older`, with the chat's run). Otherwise, at go-live the chat's pointer must
/// still name the expected previous run (else `retry`), which is superseded when still live (its
/// end at [`END_ID`], at its stream's head); at a re-base, a chat taken by a run with no start
/// stamp ends the run `superseded`.
///
/// A run whose end its replica's readers already got (it ended before it was first written)
/// is written ended in the same step, that end at `seq`: no other end can come between its
/// go-live and its end (one end for every reader).
///
/// Answers `ok`/`older` with the chat's run and the stream's `entries-added` (the lane counts
/// its appends from it, [`TOUCH`] compares), or `ended` (end JSON, seq), `fenced`, `retry`,
/// `superseded`.
///
/// KEYS: chat, m, s, k, prev m, prev s. ARGV: mode (`live`|`rebase`), run, expected previous
/// run (`""`: none), lease, producer, win, scope, ttl ms, seq, checkpoint (`""`: none),
/// superseded end JSON for the previous run, previous run's doorbell, header, extra, when the
/// run's request arrived (ms since the Unix epoch), publish command, the run's end JSON (`""`:
/// none), retention ms, the run's doorbell.
pub static UPSERT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_stream!(),
        r#"
local chat, m, s, k, pm, ps = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mode, run, expect, lease = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, seq, ckpt, born = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10], tonumber(ARGV[15])
local st = redis.call('HMGET', m, 'state', 'lease', 'end', 'end_seq')
if st[1] == 'ended' then return {'ended', st[3], st[4]} end
if st[1] and st[2] ~= lease then return {'fenced'} end
local t, tk, tend = top(s)
if tend then return {'ended', field(tend, 'end'), field(tend, 'seq')} end
local cur = redis.call('HGET', chat, 'run')
local older = false
if cur and cur ~= run then
  local ct = tonumber(redis.call('HGET', chat, 't') or '')
  if ct and ct > born then
    older = true
  elseif mode == 'rebase' and not ct then
    return {'superseded', cur}
  elseif cur ~= expect then
    return {'retry', cur}
  end
end
if mode == 'live' and not cur and expect ~= '' then return {'retry', ''} end
if cur and cur ~= run and not older and redis.call('HGET', pm, 'state') == 'live' then
  local ph, _, pend = top(ps)
  if not pend then
    ph = ph or tonumber(redis.call('HGET', pm, 'head') or '0')
    redis.call('XADD', ps, END_ID, 'end', ARGV[11], 'seq', ph)
    if redis.call('PTTL', ps) < 0 then redis.call('PEXPIRE', ps, ttl) end
    redis.call('HSET', pm, 'state', 'ended', 'end', ARGV[11], 'end_seq', ph, 'head', ph)
    redis.call(ARGV[16], ARGV[12], 'end')
  end
end
redis.call('HSET', m, 'state', 'live', 'run', run, 'lease', lease, 'producer', ARGV[5],
  'win', ARGV[6], 'scope', ARGV[7], 'head', seq, 'producing', '1', 'header', ARGV[13],
  'extra', ARGV[14], 't', born)
redis.call('HINCRBY', m, 'gen', 1)
if not t or t < seq or (t == seq and tk == 0) then
  redis.call('XADD', s, seq .. '-1', 'base', '')
end
if ckpt ~= '' then
  redis.call('SET', k, ckpt, 'PX', ttl)
  redis.call('HSET', m, 'ckpt', seq)
elseif not redis.call('HGET', m, 'ckpt') then
  redis.call('HSET', m, 'ckpt', 0)
end
if not older then redis.call('HSET', chat, 'run', run, 't', born) end
for _, key in ipairs({m, s}) do redis.call('PEXPIRE', key, ttl) end
if not older then redis.call('PEXPIRE', chat, ttl) end
if ARGV[17] ~= '' then
  redis.call('XADD', s, END_ID, 'end', ARGV[17], 'seq', seq)
  redis.call('HSET', m, 'state', 'ended', 'end', ARGV[17], 'end_seq', seq, 'producing', '0')
  local ret = tonumber(ARGV[18])
  for _, key in ipairs({m, s, k}) do redis.call('PEXPIRE', key, ret) end
  if not older then redis.call('PEXPIRE', chat, ret) end
  redis.call(ARGV[16], ARGV[19], 'end')
end
return {older and 'older' or 'ok', cur or '', tostring(added(s))}
"#
    ))
});

/// The rare path of an append: the pipelined `XADD` of seqs `first..=last` was refused (an id
/// not above the stream's top) or found no stream (`NOMKSTREAM`). Says why, writing nothing:
/// `missing` (no meta or no stream: Redis lost the run), `ended` (the run is ended: its end is
/// the stream's top), `fenced` (a newer lease owns the run), `dup` with the durable stop flag
/// (the stream already holds `last`: a retry after a lost answer), or `gap` (the stream's top is
/// below `last` now: Redis lost entries meanwhile).
///
/// KEYS: m, s. ARGV: lease, first, last.
pub static REFUSED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_stream!(),
        r#"
local m, s = KEYS[1], KEYS[2]
local st = redis.call('HMGET', m, 'state', 'lease', 'stop')
if not st[1] then return {'missing'} end
if st[1] ~= 'live' then return {'ended'} end
if st[2] ~= ARGV[1] then return {'fenced'} end
local t, _, tend = top(s)
if tend then return {'ended'} end
if not t then return {'missing'} end
if t >= tonumber(ARGV[3]) then return {'dup', st[3] or ''} end
return {'gap'}
"#
    ))
});

/// Writes the checkpoint at `seq` (at most the stream's head).
///
/// KEYS: m, k, s. ARGV: lease, seq, value, ttl ms.
pub static CHECKPOINT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_stream!(),
        r#"
local m, k, s = KEYS[1], KEYS[2], KEYS[3]
local st = redis.call('HMGET', m, 'state', 'lease')
if st[1] ~= 'live' then return {'ended'} end
if st[2] ~= ARGV[1] then return {'fenced'} end
local head, _, tend = top(s)
if tend then return {'ended'} end
if tonumber(ARGV[2]) > (head or -1) then return {'ahead'} end
redis.call('SET', k, ARGV[3], 'PX', tonumber(ARGV[4]))
redis.call('HSET', m, 'ckpt', ARGV[2])
return {'ok'}
"#
    ))
});

/// Ends a live run at its stream's head (the entry [`END_ID`], its seq in a field), unless an
/// end is already written (then returns it: the first end wins), and rings the doorbell (`end`).
/// The producer passes its lease and how many entries it had added to the stream (the run's
/// `entries-added` as its appends left it): fewer in Redis means Redis lost some (a failover, a
/// restore from older data) and the end is refused (`gap`: the producer re-bases first, so no end
/// lands over a hole). A reaper passes the lease it saw and 0 (no count), so a producer that
/// re-based meanwhile is not reaped. Sets every key to expire after the retention, the chat's too
/// when it points at this run.
///
/// KEYS: chat, m, s, k. ARGV: lease, end JSON, retention ms, doorbell, run, producing (`0`|`1`),
/// publish command, entries the producer added (`0`: not checked).
pub static END: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_stream!(),
        r#"
local chat, m, s, k = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = redis.call('HMGET', m, 'state', 'lease', 'end', 'end_seq', 'head')
if not st[1] then return {'missing'} end
if st[1] == 'ended' then return {'ended', st[3], st[4]} end
if st[2] ~= ARGV[1] then return {'fenced'} end
local head, _, tend = top(s)
if tend then return {'ended', field(tend, 'end'), field(tend, 'seq')} end
local want = tonumber(ARGV[8])
if want > 0 then
  local n = added(s)
  if n >= 0 and n < want then return {'gap'} end
end
head = head or tonumber(st[5] or '0')
redis.call('XADD', s, END_ID, 'end', ARGV[2], 'seq', head)
redis.call('HSET', m, 'state', 'ended', 'end', ARGV[2], 'end_seq', head, 'head', head,
  'producing', ARGV[6])
local ret = tonumber(ARGV[3])
for _, key in ipairs({m, s, k}) do redis.call('PEXPIRE', key, ret) end
if redis.call('HGET', chat, 'run') == ARGV[5] then redis.call('PEXPIRE', chat, ret) end
redis.call(ARGV[7], ARGV[4], 'end')
return {'ok', ARGV[2], tostring(head)}
"#
    ))
});

/// A follower's end for a run the journal lost (Redis restarted empty, and no producer wrote
/// the run again): `owner_lost`, written first-wins as the run's end (at seq 0: the events are
/// lost) and rung on the doorbell, so a producer that comes back finds it and shows it too, and
/// a reader that comes later gets it. Returns `ok` once written, or the end already there
/// (`ended`, end JSON, seq), or `live` when the run is back (its producer re-based it).
///
/// KEYS: m, s. ARGV: run, end JSON, retention ms, doorbell, publish command.
pub static LOST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_stream!(),
        r#"
local m, s = KEYS[1], KEYS[2]
local st = redis.call('HMGET', m, 'state', 'end', 'end_seq')
if st[1] == 'ended' then return {'ended', st[2], st[3]} end
if st[1] then return {'live'} end
redis.call('DEL', s)
redis.call('XADD', s, END_ID, 'end', ARGV[2], 'seq', 0)
redis.call('HSET', m, 'state', 'ended', 'run', ARGV[1], 'head', 0, 'ckpt', 0, 'win', 1,
  'producing', '0', 'end', ARGV[2], 'end_seq', 0)
for _, key in ipairs({m, s}) do redis.call('PEXPIRE', key, tonumber(ARGV[3])) end
redis.call(ARGV[5], ARGV[4], 'end')
return {'ok', ARGV[2], '0'}
"#
    ))
});

/// The lease tick of a live run: refreshes its keys' TTL and the meta's `head` (the stream's
/// head, for the admin API), and returns its stop flag and the stream's `entries-added` (the
/// producer compares it with the appends Redis confirmed: fewer means Redis lost some, and the
/// producer re-bases).
///
/// KEYS: chat, m, s, k. ARGV: lease, ttl ms, run.
pub static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_stream!(),
        r#"
local chat, m, s, k = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = redis.call('HMGET', m, 'state', 'lease', 'stop', 'end', 'end_seq')
if not st[1] then return {'missing'} end
if st[1] ~= 'live' then return {'ended', st[4], st[5]} end
if st[2] ~= ARGV[1] then return {'fenced'} end
local head, _, tend = top(s)
if tend then return {'ended', field(tend, 'end'), field(tend, 'seq')} end
if head then redis.call('HSET', m, 'head', head) end
local ttl = tonumber(ARGV[2])
for _, key in ipairs({m, s, k}) do redis.call('PEXPIRE', key, ttl) end
if redis.call('HGET', chat, 'run') == ARGV[3] then redis.call('PEXPIRE', chat, ttl) end
return {'ok', st[3] or '', tostring(added(s))}
"#
    ))
});

/// Sets the durable stop flag of a live run. Returns `{'live', producer}` or `{'ended'}`.
///
/// KEYS: m. ARGV: reason.
pub static STOP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local st = redis.call('HMGET', KEYS[1], 'state', 'producer')
if st[1] ~= 'live' then return {'ended'} end
redis.call('HSET', KEYS[1], 'stop', ARGV[1])
return {'live', st[2]}
"#,
    )
});

/// Takes one run from an owner's bucket (`[limits] max_runs_per_owner_per_minute`, shared by
/// every replica): the bucket holds `size` runs and refills evenly over a minute, on Redis's
/// clock. Returns 0 when a run was taken, else the milliseconds until one is back. The key
/// expires a minute after its last use, when the bucket would be full again anyway.
///
/// KEYS: bucket. ARGV: size.
pub static TAKE_RUN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local size = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or size
local at = tonumber(b[2]) or now
local elapsed = now - at
if elapsed < 0 then elapsed = 0 end
tokens = math.min(size, tokens + elapsed * size / 60000)
local wait = 0
if tokens < 1 then
  wait = math.ceil((1 - tokens) * 60000 / size)
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], 60000)
return wait
"#,
    )
});

/// Adds members to one of the admin API's indexes (an owner's runs or ids, or every run), each
/// scored by when it stops counting (Redis server time plus `ttl`, ms), after dropping the
/// members whose time passed; the key then expires `ttl` from now, when its newest member
/// would. A run's writer adds its run on every lease tick, so its member outlives the run's
/// keys by at most a lease.
///
/// KEYS: index. ARGV: ttl ms, member….
pub static INDEX: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
"#,
    )
});

/// Takes one of an owner's places under `[limits] max_active_runs_per_owner`, shared by every
/// replica: a member per run going, scored by when it lapses (Redis server time plus `ttl`;
/// its replica refreshes it, so a crashed replica's places lapse). Drops lapsed members, then
/// refuses (0) when `max` are held, else adds `token` (1). The key expires with its newest member.
///
/// KEYS: active. ARGV: max, token, ttl ms.
pub static ADMIT_ACTIVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
"#,
    )
});

/// Refreshes the places an owner holds on this replica ([`ADMIT_ACTIVE`]): each still there
/// lapses `ttl` from now (a place already given back or lapsed is not taken again).
///
/// KEYS: active. ARGV: ttl ms, token….
pub static REFRESH_ACTIVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ttl, ARGV[i]) end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ttl) end
return n
"#,
    )
});
