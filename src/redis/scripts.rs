//! The Lua scripts of the fleet: each one round trip, atomic, and fenced by the lease token.
//!
//! Every script that writes starts with `#!lua` (Redis 7 script flags, none set): Redis
//! refuses such a script before it runs when it is out of memory, so an `OOM` never leaves
//! half of a script applied. Scripts that name keys of two slots (a conversation's and the
//! queue) need a single Redis server, which is what the fleet runs on (see the module docs).
//!
//! Writes of one lease are numbered: `meta.wrote` holds `<token> <n>` of the last one
//! applied. A write checks that it is the next one (so a write after a failed one never
//! leaves a hole) and returns 1 without doing anything when it, or a later write of the
//! lease, was applied already (so the writes whose replies were lost can be sent again, in
//! order, on a new connection: each one that landed is recognised, the first one too when
//! later ones landed after it).

use std::sync::OnceLock;

use super::wire::Wire;
/// Queues a request: an inbox entry and its announcement on the queue, once per request id
/// (a request sent again after its reply was lost finds its entry among the inbox's last).
/// KEYS: inbox, queue. ARGV: request id, kind, text, conversation. Returns the inbox entry
/// id.
pub(crate) static REQUEST: Script = Script::new(
    r"#!lua
local recent = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 32)
for _, e in ipairs(recent) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'request' and f[i + 1] == ARGV[1] then return e[1] end
  end
end
local id = redis.call('XADD', KEYS[1], '*', 'kind', ARGV[2], 'text', ARGV[3], 'request', ARGV[1])
redis.call('XADD', KEYS[2], '*', 'conversation', ARGV[4])
return id
",
);

/// Takes the lease (or keeps it, when it is ours already: the call may be a retry) and reads
/// what a run needs. KEYS: lease, meta, inbox, messages. ARGV: token, lease ms, page size,
/// the prefix of every token of this worker. A lease held under another token of this
/// worker is taken over: the worker runs one conversation at a time, so that token is of a
/// run that already broke off (Redis restarted or refused its writes, and the lease could
/// not be dropped then), and its writes are refused from now on. Returns `{0}` when
/// another worker holds the lease, else `{1, done, started, failed, inbox entries after
/// done (16), the first page of the transcript (none when the inbox has nothing to do)}`:
/// a page shorter than the page size is the whole transcript.
///
/// Four commands when the conversation is free: the lease is set only where none is held
/// (`SET NX GET`), and set again only when the one held is this worker's.
pub(crate) static BEGIN: Script = Script::new(
    r"#!lua
local held = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if held then
  if held ~= ARGV[1] and string.sub(held, 1, #ARGV[4]) ~= ARGV[4] then return {0} end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
local meta = redis.call('HMGET', KEYS[2], 'done', 'started', 'failed')
local from = '-'
if meta[1] then from = '(' .. meta[1] end
local inbox = redis.call('XRANGE', KEYS[3], from, '+', 'COUNT', 16)
local page = {}
if #inbox > 0 then page = redis.call('LRANGE', KEYS[4], 0, tonumber(ARGV[3]) - 1) end
return {1, meta[1] or '', meta[2] or '', meta[3] or '', inbox, page}
",
);

/// The Lua of applying a batch of a run's writes, shared by [`WRITE`] and [`END`]:
/// `apply(token, n, wrote, messages, events, cap, started, first, set)` checks that batch
/// `n` of lease `token` is the next one after `wrote` (`meta.wrote` as read; returns 1
/// without doing anything when it or a later batch of the lease was applied already, -1
/// when an earlier batch is missing), then appends `ARGV[first]` (the batch's event lines,
/// each ending in a newline, or '' for none) to the event stream as one entry (field
/// `lines`), and the messages' JSON of `ARGV` after it to the transcript, in order, with one
/// `RPUSH`; and adds to `set` the fields of `meta` to write: `started` (when not '') and
/// `wrote = "<token> <n>"` (the caller writes them with one `HSET`).
///
/// One `XADD` per batch, not per event: each `redis.call` and each argument costs Redis
/// more than the entry's bytes do.
macro_rules! apply_batch {
    () => {
        r"
local function apply(token, n, wrote, messages, events, cap, started, first, set)
  local this = token .. ' ' .. n
  -- The last batch of this lease applied (0: none). Batches sent again after a break come
  -- in their order, behind later ones that landed already: each of them was applied.
  local last = 0
  if wrote then
    local lease, m = string.match(wrote, '^(.*) (%d+)$')
    if lease == token then last = tonumber(m) end
  end
  if tonumber(n) <= last then return 1 end
  if tonumber(n) > last + 1 then return -1 end
  if ARGV[first] ~= '' then
    redis.call('XADD', events, 'MAXLEN', '~', cap, '*', 'lines', ARGV[first])
  end
  -- Lua unpacks at most a few thousand values at once.
  for i = first + 1, #ARGV, 1000 do
    redis.call('RPUSH', messages, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  if started ~= '' then
    set[#set + 1] = 'started'
    set[#set + 1] = started
  end
  set[#set + 1] = 'wrote'
  set[#set + 1] = this
  return 1
end
"
    };
}

/// The Lua of acknowledging a queue entry, shared by [`END`] and [`ACK`]:
/// `ack(queue, group, entry, trim)` acknowledges `entry`, then, when `trim`, drops the
/// queue's handled entries in whole stream nodes (`XTRIM MINID ~`): those before both
/// `entry` and the group's oldest pending entry. Each of them was delivered (the group
/// hands entries out in order, and `entry` was handed out) and is not pending: it was
/// acknowledged. An entry pending under any worker, dead or alive, and every entry not
/// delivered yet, stay.
///
/// Not `XDEL` per entry: deleting the queue's first entry makes Redis scan the stream node
/// from its start for the new first one (and find the entry from there), about 50 entries
/// a call on a node of 100; a node trimmed whole costs no scan. So the queue's length
/// (`XLEN`) counts up to a node of handled entries too.
macro_rules! ack_entry {
    () => {
        r"
local function before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
local function ack(queue, group, entry, trim)
  redis.call('XACK', queue, group, entry)
  if not trim then return end
  local min = entry
  local oldest = redis.call('XPENDING', queue, group, '-', '+', 1)
  if #oldest > 0 and before(oldest[1][1], min) then min = oldest[1][1] end
  redis.call('XTRIM', queue, 'MINID', '~', min)
end
"
    };
}

/// Acknowledges a queue entry that runs nothing and trims the queue (see `ack_entry!`).
/// KEYS: queue. ARGV: group, entry. Returns 1.
pub(crate) static ACK: Script = Script::new(concat!(
    "#!lua\n",
    ack_entry!(),
    r"
ack(KEYS[1], ARGV[1], ARGV[2], true)
return 1
"
));

/// Appends a batch of a run's writes in order, if the lease is still ours and this batch is
/// the next one. KEYS: lease, messages, events, meta. ARGV: token, batch number, event
/// stream cap, the inbox entry whose prompt the batch stores (or ''), the batch's event
/// lines (or ''), then the messages' JSON. Returns 1 (applied, now or before), 0 (the lease
/// is not ours), -1 (an earlier batch is missing).
pub(crate) static WRITE: Script = Script::new(concat!(
    "#!lua\n",
    apply_batch!(),
    r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local set = {}
local wrote = redis.call('HGET', KEYS[4], 'wrote')
local applied = apply(ARGV[1], ARGV[2], wrote, KEYS[2], KEYS[3], ARGV[3], ARGV[4], 5, set)
if #set > 0 then redis.call('HSET', KEYS[4], unpack(set)) end
return applied
"
));

/// Ends a run (or a request that runs nothing), with the run's last batch of writes when
/// it is given (one round trip for both): applies that batch as [`WRITE`] does, records
/// `done`, drops the inbox entries before it, then either hands back the next inbox
/// entries (the lease is kept) or releases the lease and acknowledges the queue entry.
/// KEYS: lease, meta, inbox, queue, messages, events. ARGV: token, the last write expected
/// (`<token> <n>`, or '' for none; with a batch, that batch's), the inbox entry done (or
/// ''), the queue entry (or ''), the group, lease ms, whether to trim the queue ('1' or
/// '': a worker trims at every `TRIM_EVERY`th end), `>` and the conversation's name to
/// hand it back to the queue when there is more to do (or '': the lease is kept, and the
/// entries returned), then the batch or nothing: its number, the event stream cap, the inbox
/// entry whose prompt it stores (or ''), its event lines and messages as [`WRITE`] takes
/// them. Returns `{1}` released, `{2}` released and handed back (announced again on the
/// queue), `{0, entries}` more to do, `{-1}` the lease is not ours, `{-2}` a write of the
/// run is missing.
///
/// `meta` is read with one `HMGET` and written with one `HSET`; the queue entry is
/// acknowledged as [`ACK`] does it, the queue trimmed only when asked.
pub(crate) static END: Script = Script::new(concat!(
    "#!lua\n",
    apply_batch!(),
    ack_entry!(),
    r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  if redis.call('HGET', KEYS[2], 'ended') == ARGV[1] then return {1} end
  return {-1}
end
local meta = redis.call('HMGET', KEYS[2], 'wrote', 'done', 'failed')
local set = {}
if #ARGV > 8 then
  if apply(ARGV[1], ARGV[9], meta[1], KEYS[5], KEYS[6], ARGV[10], ARGV[11], 12, set) ~= 1 then
    return {-2}
  end
elseif ARGV[2] ~= '' and meta[1] ~= ARGV[2] then
  return {-2}
end
local done = meta[2]
if ARGV[3] ~= '' then
  done = ARGV[3]
  set[#set + 1] = 'done'
  set[#set + 1] = done
  if meta[3] then redis.call('HDEL', KEYS[2], 'failed') end
  redis.call('XTRIM', KEYS[3], 'MINID', done)
end
local from = '-'
if done then from = '(' .. done end
local more = redis.call('XRANGE', KEYS[3], from, '+', 'COUNT', 16)
local status = 1
if #more > 0 then
  if ARGV[8] == '' then
    if #set > 0 then redis.call('HSET', KEYS[2], unpack(set)) end
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
    return {0, more}
  end
  redis.call('XADD', KEYS[4], '*', 'conversation', string.sub(ARGV[8], 2))
  status = 2
end
redis.call('DEL', KEYS[1])
set[#set + 1] = 'ended'
set[#set + 1] = ARGV[1]
redis.call('HSET', KEYS[2], unpack(set))
if ARGV[4] ~= '' then ack(KEYS[4], ARGV[5], ARGV[4], ARGV[7] ~= '') end
return {status}
"
));

/// Records that the inbox entry ARGV[2] failed; at the ARGV[4]th failure in a row moves it
/// to the dead-letter stream with its error and records it done, keeping the lease (the
/// conversation goes on with its next request); else frees the lease. KEYS: lease, meta, inbox, dead. ARGV: token, entry id, error, max failures,
/// conversation, kind, text. Returns `{1, failures}` (to be tried again), `{2, failures}`
/// (dead-lettered), `{-1}` (the lease is not ours).
pub(crate) static FAIL: Script = Script::new(
    r"#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
local failed = redis.call('HGET', KEYS[2], 'failed')
local count = 1
if failed then
  local id, n = string.match(failed, '^(%S+) (%d+)$')
  if id == ARGV[2] then count = tonumber(n) + 1 end
end
if count >= tonumber(ARGV[4]) then
  redis.call('XADD', KEYS[4], '*', 'conversation', ARGV[5], 'entry', ARGV[2],
    'kind', ARGV[6], 'text', ARGV[7], 'error', ARGV[3], 'failures', count)
  redis.call('HSET', KEYS[2], 'done', ARGV[2])
  redis.call('HDEL', KEYS[2], 'failed')
  redis.call('XTRIM', KEYS[3], 'MINID', ARGV[2])
  return {2, count}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'failed', ARGV[2] .. ' ' .. count)
return {1, count}
",
);

/// Extends the lease if it is still ours, and keeps the queue entries fresh (so no other
/// worker claims them): the conversation's, and those the worker read ahead, which wait in
/// its hands until the conversation is done. KEYS: lease, queue. ARGV: token, lease ms,
/// group, consumer, the queue entries. Returns 1, or 0 when the lease is not ours.
pub(crate) static RENEW: Script = Script::new(
    r"#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local claim = {'XCLAIM', KEYS[2], ARGV[3], ARGV[4], 0}
for i = 5, #ARGV do claim[#claim + 1] = ARGV[i] end
claim[#claim + 1] = 'JUSTID'
redis.call(unpack(claim))
return 1
",
);

/// Deletes the lease if it is still ours. KEYS: lease. ARGV: token.
pub(crate) static DROP_LEASE: Script = Script::new(
    r"#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
",
);

/// Reads a stream's entries after ARGV[1] (from it, when ARGV[3] is '1': a mirror that
/// folded only part of that entry), at most ARGV[2], together with what
/// tells whether entries after ARGV[1] were deleted before they were read. KEYS: events.
/// Returns `{exists, length, first id, max deleted id, entries added, last id, after
/// exists, entries}`, with `after exists` 1 when the entry ARGV[1] itself is still there.
pub(crate) static READ: Script = Script::new(
    r"
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
local first = '0-0'
if type(f['first-entry']) == 'table' then first = f['first-entry'][1] end
local present = 0
if ARGV[1] ~= '0-0' and #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) > 0 then present = 1 end
local from = '(' .. ARGV[1]
if ARGV[3] == '1' then from = ARGV[1] end
local entries = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', ARGV[2])
return {1, f['length'], first, f['max-deleted-entry-id'], f['entries-added'],
  f['last-generated-id'], present, entries}
",
);

/// A conversation's transcript and the last id of its event stream, read at one instant.
/// KEYS: messages, events. ARGV: '1' to read the transcript. Returns `{last id or '0-0',
/// entries added, messages (or none)}`.
pub(crate) static SNAPSHOT: Script = Script::new(
    r"
local last, added = '0-0', 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1] end
    if info[i] == 'entries-added' then added = info[i + 1] end
  end
end
local messages = {}
if ARGV[1] == '1' then messages = redis.call('LRANGE', KEYS[1], 0, -1) end
return {last, added, messages}
",
);

/// A script of the fleet, run by its SHA1 (`EVALSHA`) on connections that loaded it.
///
/// Every connection that runs scripts loads them when it opens (`SCRIPT LOAD`, one round
/// trip, [`load`]), so a call sends its arguments and not the script's text (1-2 KB) and
/// Redis does not hash that text again at each call. A server whose script cache was
/// emptied (`SCRIPT FLUSH`, a restart, a failover to a replica that never loaded them)
/// answers `NOSCRIPT`, which ran nothing: the connection is then dropped and the call sent
/// again on a new one, which loads the scripts first (see [`super::conn`]).
pub(crate) struct Script {
    body: &'static str,
    /// The SHA1 Redis gave when it loaded `body`: the same on every server.
    sha: OnceLock<String>,
}

impl Script {
    const fn new(body: &'static str) -> Script {
        Script {
            body,
            sha: OnceLock::new(),
        }
    }
}

/// Loads `scripts` on `conn` (a new connection), in one round trip.
pub(crate) fn load(conn: &mut Wire, scripts: &[&Script]) -> ::redis::RedisResult<()> {
    if scripts.is_empty() {
        return Ok(());
    }
    let mut pipe = ::redis::pipe();
    for script in scripts {
        pipe.cmd("SCRIPT").arg("LOAD").arg(script.body);
    }
    let shas: Vec<String> = pipe.query(conn)?;
    for (script, sha) in scripts.iter().zip(shas) {
        let _ = script.sha.set(sha);
    }
    Ok(())
}

/// Runs `script` with `keys`: an `EVALSHA` once any connection loaded it, else an `EVAL`
/// with its text (which also caches it in Redis).
pub(crate) fn eval(script: &Script, keys: &[&str]) -> ::redis::Cmd {
    let mut cmd = match script.sha.get() {
        Some(sha) => {
            let mut cmd = ::redis::cmd("EVALSHA");
            cmd.arg(sha.as_str());
            cmd
        }
        None => {
            let mut cmd = ::redis::cmd("EVAL");
            cmd.arg(script.body);
            cmd
        }
    };
    cmd.arg(keys.len()).arg(keys);
    cmd
}

/// Whether `e` is Redis saying it does not have the script: nothing ran.
pub(crate) fn missing(e: &::redis::RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}

/// What the worker's own connection runs.
pub(crate) static FOR_WORKER: &[&Script] = &[&BEGIN, &WRITE, &END, &FAIL, &DROP_LEASE, &ACK];
/// What the worker's side connection runs.
pub(crate) static FOR_SIDE: &[&Script] = &[&RENEW];
/// What a [`super::Queue`] runs.
pub(crate) static FOR_QUEUE: &[&Script] = &[&REQUEST];
/// What a [`super::RemoteMirror`] runs.
pub(crate) static FOR_MIRROR: &[&Script] = &[&READ, &SNAPSHOT];
