import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile, appendFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { backoffDelay } from '../../src/backoff.js';
import { TokenBucket } from '../../src/budget.js';
import { ErrorCode, HandshakeError, ServerError, isAuth, isRetryable, isSignedOut, ConnectionLostError } from '../../src/errors.js';
import { FileOutbox } from '../../src/file-outbox.js';
import { directSessionId, newMessageId } from '../../src/ids.js';
import { Receipts } from '../../src/receipts.js';
import { decodeFrame, BadFrameError } from '../../src/wire.js';
import { wsURL } from '../../src/client.js';
import type { Cursor } from '../../src/wire.js';

describe('backoff', () => {
  it('doubles from min to max with jitter in [d/2, d)', () => {
    for (const [attempt, d] of [
      [0, 100],
      [1, 200],
      [3, 800],
      [10, 5000],
    ] as const) {
      assert.equal(backoffDelay(100, 5000, attempt, () => 0), d / 2);
      assert.ok(backoffDelay(100, 5000, attempt, () => 0.999) < d);
    }
  });
});

describe('TokenBucket', () => {
  it('gives a burst at once, then one token per 1/rate, waiters in turn', () => {
    let now = 1_000;
    const b = new TokenBucket(10, 20, () => now);
    for (let i = 0; i < 20; i++) assert.equal(b.reserve(), 0, `token ${i} of the burst`);
    assert.equal(b.reserve(), 100);
    assert.equal(b.reserve(), 200, 'a second waiter waits behind the first');
    now += 200; // the two waiters' tokens
    assert.equal(b.reserve(), 100);
    now += 60_000;
    for (let i = 0; i < 20; i++) assert.equal(b.reserve(), 0);
    assert.ok(b.reserve() > 0, 'no more than the burst is saved up');
  });
  it('keeps a slow rate with a burst of one', () => {
    let now = 0;
    const b = new TokenBucket(0.5, 1, () => now);
    assert.equal(b.reserve(), 0);
    assert.equal(b.reserve(), 2_000);
    now -= 5_000; // a clock set back refills nothing
    assert.equal(b.reserve(), 4_000);
  });
});

describe('ids', () => {
  it('makes UUIDv7s that sort by time', () => {
    const a = newMessageId(1_700_000_000_000);
    const b = newMessageId(1_700_000_000_001);
    assert.match(a, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.ok(a < b);
    assert.notEqual(newMessageId(), newMessageId());
  });
  it('computes the direct session ID of the protocol, whatever the order', async () => {
    const id = await directSessionId('bob', 'alice');
    assert.equal(id, await directSessionId('alice', 'bob'));
    assert.match(id, /^d-[0-9a-f]{32}$/);
    // SHA-256("direct\0alice\0bob"), first 16 bytes.
    const { createHash } = await import('node:crypto');
    assert.equal(id, 'd-' + createHash('sha256').update('direct\0alice\0bob').digest('hex').slice(0, 32));
  });
});

describe('errors', () => {
  it('classify by the registry', () => {
    const e = new ServerError({ code: ErrorCode.rate_limited, name: 'rate_limited', message: 'slow down', retryable: true });
    assert.equal(isRetryable(e), true);
    assert.equal(isRetryable(new ServerError({ code: 4001, name: 'not_a_member', message: '', retryable: false })), false);
    assert.equal(isAuth(new HandshakeError(401)), true);
    assert.equal(isRetryable(new HandshakeError(503)), true);
    assert.equal(isRetryable(new ConnectionLostError()), true);
    const so = new HandshakeError(401, new ServerError({ code: 2004, name: 'signed_out', message: '', retryable: false }));
    assert.equal(isSignedOut(so), true);
    assert.equal(e.code, 3001);
    assert.equal(e.errorName, 'rate_limited');
  });
});

describe('decodeFrame', () => {
  it('refuses frames the client cannot rely on', () => {
    for (const bad of ['{}', '[]', 'nope', '{"op":"event"}', '{"op":"event","event":{"session_id":"s","seq":0}}',
      '{"op":"ack","status":"ok"}', '{"op":"ack","client_msg_id":"c","status":"ok"}', '{"op":"error"}',
      '{"op":"result","messages":[{"seq":-1}]}']) {
      assert.throws(() => decodeFrame(bad), BadFrameError, bad);
    }
    const f = decodeFrame('{"op":"ack","client_msg_id":"c","status":"ok","seq":3,"msg_id":"7397188416321597440"}');
    assert.equal(f.msg_id, '7397188416321597440', 'msg_id stays a string');
  });
});

describe('wsURL', () => {
  it('maps http to ws and defaults the path', () => {
    assert.equal(wsURL('http://127.0.0.1:8080'), 'ws://127.0.0.1:8080/v1/ws');
    assert.equal(wsURL('wss://x.example/custom'), 'wss://x.example/custom');
    assert.throws(() => wsURL('ftp://x'));
  });
});

describe('Receipts', () => {
  it('flushes the highest seq per session after count events or the interval, and keeps what it could not write', async () => {
    const frames: Cursor[][] = [];
    let fail = false;
    const r = new Receipts(3, 30, (cs) => {
      if (fail) throw new Error('no connection');
      frames.push(cs);
    });
    r.add('b', 1);
    r.add('a', 1);
    r.add('a', 2);
    assert.deepEqual(frames, [[{ session_id: 'a', seq: 2 }, { session_id: 'b', seq: 1 }]], 'count reached: flushed at once, sorted');
    fail = true;
    r.add('a', 3);
    await new Promise((res) => setTimeout(res, 60));
    assert.equal(frames.length, 1, 'the failed flush wrote nothing');
    fail = false;
    r.retry();
    await new Promise((res) => setTimeout(res, 60));
    assert.deepEqual(frames[1], [{ session_id: 'a', seq: 3 }], 'kept for the next flush');
    r.close();
  });
});

describe('FileOutbox', () => {
  it('keeps what is not done across a reopen, in posting order, and ignores a torn last line', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'seqflow-outbox-'));
    const path = join(dir, 'o.jsonl');
    const o = new FileOutbox(path);
    assert.deepEqual(await o.load(), []);
    for (const id of ['c1', 'c2', 'c3']) await o.add({ op: 'send', client_msg_id: id, session_id: 's', type: 'text', body: id });
    await o.done('c2');
    await o.close();
    await appendFile(path, '{"add":{"op":"send","client_msg_id":"c4"');
    const again = new FileOutbox(path);
    assert.deepEqual((await again.load()).map((f) => f.client_msg_id), ['c1', 'c3']);
    await again.close();
    assert.equal((await readFile(path, 'utf8')).trim().split('\n').length, 2, 'compacted on load');
  });
  it('refuses a damaged line that is not the last', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'seqflow-outbox-'));
    const path = join(dir, 'o.jsonl');
    await writeFile(path, 'garbage\n{"done":"x"}\n');
    await assert.rejects(new FileOutbox(path).load(), /line 1/);
  });
});
