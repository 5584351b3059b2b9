import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Conn } from '../../src/conn.js';
import { ClosedError, ServerError } from '../../src/errors.js';
import { MemoryOutbox } from '../../src/outbox.js';
import { Sender } from '../../src/sender.js';
import type { ClientFrame } from '../../src/wire.js';

/** A connection that records the frames sent on it. */
function fakeConn(): Conn & { frames: ClientFrame[]; dead: boolean } {
  const c = { frames: [] as ClientFrame[], dead: false, send(f: ClientFrame) { c.frames.push(f); } };
  return c as unknown as Conn & { frames: ClientFrame[]; dead: boolean };
}
const stats = () => ({ posted: 0, resent: 0, retryableErrors: 0, accepted: 0, duplicateAcks: 0 });
const send = (id: string): ClientFrame => ({ op: 'send', client_msg_id: id, session_id: 's', type: 'text', body: id });
const ok = (id: string, seq: number, duplicate = false) => ({ op: 'ack', client_msg_id: id, session_id: 's', status: 'ok', seq, msg_id: String(seq), duplicate });

describe('Sender', () => {
  it('bounds the window: a post waits until an answer frees a slot', async () => {
    const s = new Sender(2, 10_000, 3_000, 10, 100, undefined, stats());
    const c = fakeConn();
    s.attach(c);
    await s.post(send('a'));
    await s.post(send('b'));
    let third = false;
    const p3 = s.post(send('c')).then((p) => ((third = true), p));
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(third, false, 'the third post waits');
    s.onFrame(ok('a', 1));
    await p3;
    assert.deepEqual(c.frames.map((f) => f.client_msg_id), ['a', 'b', 'c']);
    s.close();
  });

  it('resends every unanswered command, in posting order, with the same client_msg_id on a new connection', async () => {
    const st = stats();
    const s = new Sender(8, 10_000, 3_000, 10, 100, undefined, st);
    const c1 = fakeConn();
    s.attach(c1);
    const pa = await s.post(send('a'));
    const pb = await s.post(send('b'));
    s.onFrame(ok('a', 1));
    assert.deepEqual(await pa.wait(), { clientMsgId: 'a', sessionId: 's', seq: 1, msgId: '1', serverTs: 0, duplicate: false });
    c1.dead = true;
    s.attach(undefined);
    await s.post(send('c')); // posted while disconnected
    const c2 = fakeConn();
    s.attach(c2);
    assert.deepEqual(c2.frames.map((f) => f.client_msg_id), ['b', 'c']);
    assert.equal(st.resent, 1);
    s.onFrame(ok('b', 2, true));
    assert.equal((await pb.wait()).duplicate, true);
    assert.equal(st.duplicateAcks, 1);
    s.close();
  });

  it('retries a retryable error after a backoff, and finishes on a final one', async () => {
    const st = stats();
    const s = new Sender(8, 10_000, 3_000, 20, 20, undefined, st);
    const c = fakeConn();
    s.attach(c);
    const p = await s.post(send('a'));
    s.onFrame({ op: 'error', client_msg_id: 'a', error: { code: 5001, name: 'unavailable', message: '', retryable: true } });
    await new Promise((r) => setTimeout(r, 120));
    assert.ok(c.frames.length >= 2, `resent after the backoff: ${c.frames.length} frames`);
    assert.equal(st.retryableErrors, 1);
    s.onFrame({ op: 'error', client_msg_id: 'a', error: { code: 4001, name: 'not_a_member', message: 'no', retryable: false } });
    await assert.rejects(p.wait(), (e: unknown) => e instanceof ServerError && e.code === 4001);
    s.close();
  });

  it('resends when the ACK is overdue, and asks again when an accepted ACK gets no seq_notice', async () => {
    const s = new Sender(8, 60, 60, 10, 100, undefined, stats());
    const c = fakeConn();
    s.attach(c);
    await s.post(send('a'));
    await new Promise((r) => setTimeout(r, 150));
    const n = c.frames.length;
    assert.ok(n >= 2, `resent after the ACK timeout: ${n} frames`);
    s.onFrame({ op: 'ack', client_msg_id: 'a', session_id: 's', status: 'accepted' });
    await new Promise((r) => setTimeout(r, 150));
    assert.ok(c.frames.length > n, 'asked again after the accepted timeout');
    assert.ok(c.frames.every((f) => f.client_msg_id === 'a'));
    s.close();
  });

  it('records in the outbox before sending, and removes on the answer; close fails what is in flight', async () => {
    const ob = new MemoryOutbox();
    const s = new Sender(8, 10_000, 3_000, 10, 100, ob, stats());
    const c = fakeConn();
    s.attach(c);
    const pa = await s.post(send('a'));
    const pb = await s.post(send('b'));
    assert.deepEqual([...ob.live.keys()], ['a', 'b']);
    assert.equal(await s.post(send('a')), pa, 'posting an ID in flight returns the command in flight');
    s.onFrame(ok('a', 1));
    await pa.wait();
    await new Promise((r) => setTimeout(r, 0));
    assert.deepEqual([...ob.live.keys()], ['b']);
    s.close();
    await assert.rejects(pb.wait(), ClosedError);
    assert.deepEqual([...ob.live.keys()], ['b'], 'the outbox keeps it for the next client');
  });
});
