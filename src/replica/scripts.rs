//! The Lua scripts behind every state change of a run in Redis, the per-owner rate limit's
//! shared bucket ([`TAKE_RUN`], under the owner's own hash tag), the admin API's indexes
//! ([`INDEX`]) and the owners' shared places under the active-runs limit ([`ADMIT_ACTIVE`]). Each takes all its keys in
//! `KEYS`, all under one chat's hash tag, validates everything before its first write (Redis
//! does not roll a script back), and compares the producer's lease token (fencing). The first
//! end written wins. A script that rings a doorbell takes the publish command last (`PUBLISH`,
//! or `SPUBLISH` in a Redis Cluster: the doorbell shares its run's hash tag, so the script
//! stays on one slot).
//!
//! Meta hash fields: `state` (`live`|`ended`), `run`, `scope`, `producer`, `lease`, `head`,
//! `ckpt`, `gen`, `win`, `producing`, `stop`, `end` (JSON), `end_seq`, `header`, `extra` (the
//! path of the route recording it), `t`
//! (when its turn's request arrived, ms since the Unix epoch on its producer's clock), and
//! `watch`: until when (Redis server time, ms) some replica follows the run. Doorbells are
//! published only while `watch` is set, so a run nobody follows costs no `PUBLISH`; the
//! producer's lease tick clears a lapsed one. Chat hash fields: `run` (the chat's current run)
//! and its `t`.

use std::sync::LazyLock;

use redis::Script;

/// Makes a run live at head `seq` (0 at go-live; the local head at a re-base), writing the
/// checkpoint when given, and points the chat at it. A chat's runs are ordered by when their
/// requests arrived, as stamped by their producers' clocks (the chat hash's `t`): a run never
/// supersedes one whose request came after its own. Such an older run (its go-live reached Redis late) is written live but
/// leaves the chat's pointer alone (`older`, with the chat's run). Otherwise, at go-live the
/// chat's pointer must still name the expected previous run (else `retry`), which is
/// superseded when still live; at a re-base, a chat taken by a run with no start stamp ends
/// the run `superseded`.
///
/// A run whose end its replica's readers already got (it ended before it was first written)
/// is written ended in the same step, that end at `seq`: no other end can come between its
/// go-live and its end (one end for every reader).
///
/// KEYS: chat, m, s, k, prev m, prev s. ARGV: mode (`live`|`rebase`), run, expected previous
/// run (`""`: none), lease, producer, win, scope, ttl ms, seq, checkpoint (`""`: none),
/// superseded end JSON for the previous run, previous run's doorbell, header, extra, when the
/// run's request arrived (ms since the Unix epoch), publish command, the run's end JSON (`""`:
/// none), retention ms, the run's doorbell.
pub static UPSERT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local chat, m, s, k, pm, ps = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mode, run, expect, lease = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, seq, ckpt, born = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10], tonumber(ARGV[15])
local st = redis.call('HMGET', m, 'state', 'lease', 'end', 'end_seq')
if st[1] == 'ended' then return {'ended', st[3], st[4]} end
if st[1] and st[2] ~= lease then return {'fenced'} end
local cur = redis.call('HGET', chat, 'run')
local older = false
if cur and cur ~= run then
  local t = tonumber(redis.call('HGET', chat, 't') or '')
  if t and t > born then
    older = true
  elseif mode == 'rebase' and not t then
    return {'superseded', cur}
  elseif cur ~= expect then
    return {'retry', cur}
  end
end
if mode == 'live' and not cur and expect ~= '' then return {'retry', ''} end
if cur and cur ~= run and not older then
  local p = redis.call('HMGET', pm, 'state', 'head', 'watch')
  if p[1] == 'live' then
    local ph = p[2] or '0'
    redis.call('XADD', ps, ph .. '-1', 'end', ARGV[11])
    redis.call('HSET', pm, 'state', 'ended', 'end', ARGV[11], 'end_seq', ph)
    if p[3] then redis.call(ARGV[16], ARGV[12], 'end') end
  end
end
redis.call('HSET', m, 'state', 'live', 'run', run, 'lease', lease, 'producer', ARGV[5],
  'win', ARGV[6], 'scope', ARGV[7], 'head', seq, 'producing', '1', 'header', ARGV[13],
  'extra', ARGV[14], 't', born)
redis.call('HINCRBY', m, 'gen', 1)
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
  redis.call('XADD', s, seq .. '-1', 'end', ARGV[17])
  redis.call('HSET', m, 'state', 'ended', 'end', ARGV[17], 'end_seq', seq, 'producing', '0')
  local ret = tonumber(ARGV[18])
  for _, key in ipairs({m, s, k}) do redis.call('PEXPIRE', key, ret) end
  if not older then redis.call('PEXPIRE', chat, ret) end
  if redis.call('HGET', m, 'watch') then redis.call(ARGV[16], ARGV[19], 'end') end
end
if older then return {'older', cur} end
return {'ok'}
"#,
    )
});

/// Appends one batch (seqs `first..=last`) as stream entry `<last>-0`, moves the head and, when
/// some replica follows the run (`watch`), rings the doorbell with the entry itself
/// (`<first> <last> <data>`), so a follower that is caught up applies it without reading the
/// stream. Returns the integer 1 once the batch is written and no stop flag is set (the common
/// answer: an integer costs neither side an array to build or parse), `ok`/`dup` with the
/// durable stop flag, or `gap`, `ended`, `fenced`, `missing` without writing.
///
/// KEYS: m, s. ARGV: lease, first, last, data, minid, doorbell, publish command.
pub static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local m, s = KEYS[1], KEYS[2]
local first, last = tonumber(ARGV[2]), tonumber(ARGV[3])
local st = redis.call('HMGET', m, 'state', 'lease', 'head', 'stop', 'watch')
if not st[1] then return {'missing'} end
if st[1] ~= 'live' then return {'ended'} end
if st[2] ~= ARGV[1] then return {'fenced'} end
local head = tonumber(st[3])
if head >= last then return {'dup', st[4] or ''} end
if head ~= first - 1 then return {'gap'} end
redis.call('XADD', s, 'MINID', '~', ARGV[5], last .. '-0', 'f', first, 'd', ARGV[4])
redis.call('HSET', m, 'head', last)
if st[5] then
  redis.call(ARGV[7], ARGV[6], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
end
if st[4] then return {'ok', st[4]} end
return 1
"#,
    )
});

/// Writes the checkpoint at `seq` (at most the head).
///
/// KEYS: m, k. ARGV: lease, seq, value, ttl ms.
pub static CHECKPOINT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local m, k = KEYS[1], KEYS[2]
local st = redis.call('HMGET', m, 'state', 'lease', 'head')
if st[1] ~= 'live' then return {'ended'} end
if st[2] ~= ARGV[1] then return {'fenced'} end
if tonumber(ARGV[2]) > tonumber(st[3]) then return {'ahead'} end
redis.call('SET', k, ARGV[3], 'PX', tonumber(ARGV[4]))
redis.call('HSET', m, 'ckpt', ARGV[2])
return {'ok'}
"#,
    )
});

/// Ends a live run at its head (entry `<head>-1`), unless an end is already written (then
/// returns it: the first end wins). The producer passes its lease; a reaper passes the lease it
/// saw, so a producer that re-based meanwhile is not reaped. Sets every key to expire after the
/// retention, the chat's too when it points at this run.
///
/// KEYS: chat, m, s, k. ARGV: lease, end JSON, retention ms, doorbell, run, producing (`0`|`1`),
/// publish command.
pub static END: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local chat, m, s, k = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = redis.call('HMGET', m, 'state', 'lease', 'head', 'end', 'end_seq', 'watch')
if not st[1] then return {'missing'} end
if st[1] == 'ended' then return {'ended', st[4], st[5]} end
if st[2] ~= ARGV[1] then return {'fenced'} end
local head = st[3] or '0'
redis.call('XADD', s, head .. '-1', 'end', ARGV[2])
redis.call('HSET', m, 'state', 'ended', 'end', ARGV[2], 'end_seq', head, 'producing', ARGV[6])
local ret = tonumber(ARGV[3])
for _, key in ipairs({m, s, k}) do redis.call('PEXPIRE', key, ret) end
if redis.call('HGET', chat, 'run') == ARGV[5] then redis.call('PEXPIRE', chat, ret) end
if st[6] then redis.call(ARGV[7], ARGV[4], 'end') end
return {'ok', ARGV[2], head}
"#,
    )
});

/// A follower's end for a run the journal lost (Redis restarted empty, and no producer wrote
/// the run again): `owner_lost`, written first-wins as the run's end (at seq 0: the events are
/// lost), so a producer that comes back finds it and shows it too, and a reader that comes
/// later gets it. Returns `ok` once written, or the end already there (`ended`, end JSON,
/// seq), or `live` when the run is back (its producer re-based it).
///
/// KEYS: m, s. ARGV: run, end JSON, retention ms.
pub static LOST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local m, s = KEYS[1], KEYS[2]
local st = redis.call('HMGET', m, 'state', 'end', 'end_seq')
if st[1] == 'ended' then return {'ended', st[2], st[3]} end
if st[1] then return {'live'} end
redis.call('DEL', s)
redis.call('XADD', s, '0-1', 'end', ARGV[2])
redis.call('HSET', m, 'state', 'ended', 'run', ARGV[1], 'head', 0, 'ckpt', 0, 'win', 1,
  'producing', '0', 'end', ARGV[2], 'end_seq', 0)
for _, key in ipairs({m, s}) do redis.call('PEXPIRE', key, tonumber(ARGV[3])) end
return {'ok', ARGV[2], '0'}
"#,
    )
});

/// The lease tick of a live run: refreshes its keys' TTL, clears a lapsed `watch` and returns
/// its stop flag.
///
/// KEYS: chat, m, s, k. ARGV: lease, ttl ms, run.
pub static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local chat, m, s, k = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = redis.call('HMGET', m, 'state', 'lease', 'stop', 'end', 'end_seq', 'watch')
if not st[1] then return {'missing'} end
if st[1] ~= 'live' then return {'ended', st[4], st[5]} end
if st[2] ~= ARGV[1] then return {'fenced'} end
local ttl = tonumber(ARGV[2])
if st[6] then
  local t = redis.call('TIME')
  if tonumber(st[6]) < t[1] * 1000 + math.floor(t[2] / 1000) then
    redis.call('HDEL', m, 'watch')
  end
end
for _, key in ipairs({m, s, k}) do redis.call('PEXPIRE', key, ttl) end
if redis.call('HGET', chat, 'run') == ARGV[3] then redis.call('PEXPIRE', chat, ttl) end
return {'ok', st[3] or ''}
"#,
    )
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

/// A follower's interest in a live run: `watch` moves to at least `ttl` ms from now (server
/// time), so the producer rings the doorbell until then. Returns 0 when the run is not live
/// (nothing is written: an expired or ended run is not re-created).
///
/// KEYS: m. ARGV: ttl ms.
pub static WATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local st = redis.call('HMGET', KEYS[1], 'state', 'watch')
if st[1] ~= 'live' then return 0 end
local t = redis.call('TIME')
local til = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
if not st[2] or tonumber(st[2]) < til then redis.call('HSET', KEYS[1], 'watch', til) end
return 1
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
