// What the integration tests share: the gateway and the control URL the Go
// wrapper (ts_test.go) passes, clients that record what their app gets,
// and waits with deadlines.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { TestContext } from 'node:test';
import { Client, type Event, type NodeClientOptions } from '../../src/node.js';

export const gateway = process.env.SEQFLOW_TS_GATEWAY ?? '';
export const controlURL = process.env.SEQFLOW_TS_CONTROL ?? '';

/**
 * stackMissing says why the integration tests cannot run (no gateway from
 * the Go wrapper), or '' when they can. Under SEQFLOW_REQUIRE_STACK=1 the
 * tests fail instead of skipping, as the Go tests do.
 */
export function stackMissing(): string {
  if (gateway && controlURL) return '';
  return 'SEQFLOW_TS_GATEWAY and SEQFLOW_TS_CONTROL are not set: run the tests through `go test ./client-ts/` (ts_test.go starts the pipeline)';
}

/** requireStack fails (SEQFLOW_REQUIRE_STACK=1) or skips a test without the pipeline; true when it may go on. */
export function requireStack(t: TestContext): boolean {
  const why = stackMissing();
  if (!why) return true;
  if (process.env.SEQFLOW_REQUIRE_STACK === '1') assert.fail(why);
  t.skip(why);
  return false;
}

export async function control(path: string, method = 'GET'): Promise<string> {
  const r = await fetch(controlURL + path, { method });
  const body = await r.text();
  if (!r.ok) throw new Error(`control ${method} ${path}: HTTP ${r.status}: ${body}`);
  return body;
}

export function token(user: string, device: string): Promise<string> {
  return control(`/token?user=${encodeURIComponent(user)}&device=${encodeURIComponent(device)}`);
}

export function user(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** Recorder collects what a client's app receives. */
export class Recorder {
  events: Event[] = [];
  private wakers: (() => void)[] = [];
  add = (e: Event): void => {
    this.events.push(e);
    for (const w of this.wakers.splice(0)) w();
  };
  /** waitFor waits until ok holds for the events so far, or fails after ms. */
  async waitFor(ms: number, what: string, ok: (evs: Event[]) => boolean): Promise<Event[]> {
    const deadline = Date.now() + ms;
    while (!ok(this.events)) {
      const left = deadline - Date.now();
      if (left <= 0) assert.fail(`no ${what} within ${ms} ms; got ${this.events.length} events`);
      await new Promise<void>((r) => {
        const timer = setTimeout(r, Math.min(left, 200));
        this.wakers.push(() => {
          clearTimeout(timer);
          r();
        });
      });
    }
    return this.events;
  }
  messages(session: string): Event[] {
    return this.events.filter((e) => e.session_id === session && e.kind === 'message');
  }
}

export interface Running {
  c: Client;
  rec: Recorder;
  /** Settles when run() does; a rejection fails the test in stop. */
  done: Promise<void>;
  /** Set by a test that expects run() to reject (a sign-out): stop then does not fail on it. */
  expectEnd: boolean;
  stop(): Promise<void>;
}

/** start opens and runs a client for user/device; t's end stops it, failing the test if run() failed. */
export async function start(
  t: TestContext,
  userId: string,
  device: string,
  tune: Partial<NodeClientOptions> = {},
): Promise<Running> {
  const rec = new Recorder();
  const c = await Client.open({
    urls: [gateway],
    token: await token(userId, device),
    onEvent: rec.add,
    minBackoffMs: 50,
    maxBackoffMs: 1000,
    ackTimeoutMs: 3000,
    ...tune,
  });
  const done = c.run();
  done.catch(() => {}); // judged in stop
  let stopped: Promise<void> | undefined;
  const r: Running = {
    c,
    rec,
    done,
    expectEnd: false,
    stop: () =>
      (stopped ??= (async () => {
        c.close();
        try {
          await done;
        } catch (e) {
          if (!r.expectEnd) throw e;
        }
      })()),
  };
  t.after(r.stop);
  return r;
}

/** checkOnceInOrder: seqs of session strictly increase, every message of want arrives exactly once, and nothing else does. */
export function checkOnceInOrder(evs: Event[], session: string, want: Map<string, number>): void {
  let last = 0;
  const seen = new Set<string>();
  for (const e of evs) {
    if (e.session_id !== session) continue;
    assert.ok(e.seq > last, `seq ${e.seq} after ${last}: out of order or repeated`);
    last = e.seq;
    if (e.kind !== 'message') continue;
    const id = e.client_msg_id ?? '';
    assert.ok(want.has(id), `unexpected message ${id} at seq ${e.seq}`);
    assert.ok(!seen.has(id), `message ${id} delivered twice`);
    assert.equal(e.seq, want.get(id), `message ${id} delivered at seq ${e.seq}, acknowledged with ${want.get(id)}`);
    seen.add(id);
  }
  assert.equal(seen.size, want.size, `got ${seen.size} of ${want.size} messages`);
}

/** poll calls f until it returns a value that is not undefined, or fails after ms. */
export async function poll<T>(ms: number, what: string, f: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) assert.fail(`no ${what} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
