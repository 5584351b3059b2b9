import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Conn } from '../../src/conn.js';
import { ConnectionLostError, ReplacedError, ServerError, SignedOutError } from '../../src/errors.js';
import { adaptWebSocket, type Socket } from '../../src/transport.js';
import type { ServerFrame } from '../../src/wire.js';

/** A socket the test plays the gateway on. */
function fakeSocket() {
  const sent: any[] = [];
  const s: Socket & { sent: any[]; closed: boolean } = {
    sent,
    closed: false,
    send(text) {
      sent.push(JSON.parse(text));
    },
    close() {
      s.closed = true;
    },
    onmessage: () => {},
    onclose: () => {},
  };
  return s;
}
const hello = JSON.stringify({ op: 'hello', conn_id: 'c1', user_id: 'u', device_id: 'd', gateway_id: 'gw', heartbeat_ms: 60_000 });

describe('Conn', () => {
  it('waits for hello, routes answers by req_id and hands the rest over', async () => {
    const s = fakeSocket();
    const other: ServerFrame[] = [];
    const opening = Conn.open(s, (f) => other.push(f));
    s.onmessage(hello);
    const c = await opening;
    assert.equal(c.hello.user_id, 'u');
    const r = c.request({ op: 'changes' }, 1000);
    const id = s.sent[0].req_id;
    assert.ok(id);
    s.onmessage(JSON.stringify({ op: 'event', event: { session_id: 's', seq: 1, msg_id: '1', sender_user_id: 'x', server_ts: 0, kind: 'message' } }));
    s.onmessage(JSON.stringify({ op: 'result', req_id: id, sessions: [], total_unread: 0 }));
    assert.deepEqual((await r).sessions, []);
    assert.equal(other.length, 1);
    const e = c.request({ op: 'sync', session_id: 'x' }, 1000);
    s.onmessage(JSON.stringify({ op: 'error', req_id: s.sent[1].req_id, error: { code: 4001, name: 'not_a_member', message: 'no', retryable: false } }));
    await assert.rejects(e, (err: unknown) => err instanceof ServerError && err.code === 4001);
    c.kill(new Error('done'));
  });

  it('refuses a first frame that is not hello', async () => {
    const s = fakeSocket();
    const opening = Conn.open(s, () => {});
    s.onmessage(JSON.stringify({ op: 'pong' }));
    await assert.rejects(opening, /not hello/);
  });

  it('maps close codes: 4002 signed out, 4003 replaced, others lost; requests in flight fail as lost', async () => {
    for (const [code, want] of [
      [4002, SignedOutError],
      [4003, ReplacedError],
      [1012, ConnectionLostError],
      [4008, ConnectionLostError],
    ] as const) {
      const s = fakeSocket();
      const opening = Conn.open(s, () => {});
      s.onmessage(hello);
      const c = await opening;
      const r = c.request({ op: 'changes' }, 1000);
      s.onclose(code, 'bye');
      await assert.rejects(r, ConnectionLostError);
      assert.ok((await c.closed) instanceof want, `close ${code}`);
      assert.equal(c.dead, true);
      assert.throws(() => c.send({ op: 'ping' }), ConnectionLostError);
    }
  });

  it('drops the connection on a frame it cannot rely on', async () => {
    const s = fakeSocket();
    const opening = Conn.open(s, () => {});
    s.onmessage(hello);
    const c = await opening;
    s.onmessage('{"op":"event","event":{"session_id":"s","seq":0}}');
    assert.match((await c.closed).message, /without session or seq/);
    assert.equal(s.closed, true);
  });
});

describe('adaptWebSocket', () => {
  it('keeps frames and a close that come before the handlers are set (ws emits the hello right after open)', async () => {
    const ws: any = { readyState: 0, send() {}, close() {}, onopen: null, onmessage: null, onclose: null, onerror: null };
    const opening = adaptWebSocket(ws, new AbortController().signal);
    ws.readyState = 1;
    ws.onopen({});
    ws.onmessage({ data: hello }); // before the promise's continuation runs
    ws.onmessage({ data: JSON.stringify({ op: 'pong' }) });
    ws.onclose({ code: 4002, reason: 'signed_out' });
    const sock = await opening;
    const other: ServerFrame[] = [];
    const c = await Conn.open(sock, (f) => other.push(f), 1000);
    assert.equal(c.hello.conn_id, 'c1');
    assert.deepEqual(other.map((f) => f.op), ['pong'], 'the frame after hello is handed over, once');
    assert.ok((await c.closed) instanceof SignedOutError, 'the early close ends the connection after its frames');
  });
});
