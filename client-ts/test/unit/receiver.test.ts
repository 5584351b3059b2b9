import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Receiver } from '../../src/receiver.js';
import { Tracker } from '../../src/tracker.js';
import type { Event } from '../../src/wire.js';

const ev = (seq: number): Event => ({ session_id: 's', seq, msg_id: String(seq), sender_user_id: 'u', server_ts: 0, kind: 'message' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stats = () => ({ delivered: 0, duplicatesDropped: 0, gaps: 0, gapTimeouts: 0, synced: 0 });

/** A small seeded PRNG (mulberry32), so a failure replays. */
function rng(seed: number): () => number {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A stand-in for the gateway's sync: a session log with gaps in its seqs, of
 * which the store holds a prefix that grows as the test goes, like the
 * persister lagging the log; pages of 4.
 */
class FakeStore {
  log: Event[] = [];
  stored = 0;
  sync = async (_session: string, after: number) => {
    await sleep(1);
    const out: Event[] = [];
    for (const m of this.log.slice(0, this.stored)) {
      if (m.seq <= after) continue;
      if (out.length === 4) return { messages: out, hasMore: true };
      out.push(m);
    }
    return { messages: out, hasMore: false };
  };
}

describe('Receiver', () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    it(`delivers a log with seq gaps once and in order through a lossy, repeating push path (seed ${seed})`, async () => {
      const r = rng(seed);
      const store = new FakeStore();
      let seq = 0;
      for (let i = 0; i < 60; i++) {
        seq += 1 + (r() < 0.1 ? 1 : 0); // about one gap in ten
        store.log.push(ev(seq));
      }
      const got: number[] = [];
      const delivered: number[] = [];
      const st = stats();
      const rc = new Receiver(new Tracker(), store.sync, 3_600_000, st, (e) => void got.push(e.seq), (_s, q) => void delivered.push(q), (e) => {
        throw e;
      });
      for (const [i, m] of store.log.entries()) {
        store.stored = Math.min(store.stored + 1, store.log.length);
        const x = r();
        if (x < 0.1) {
          // lost
        } else if (x < 0.2) {
          rc.push(m);
          rc.push(m);
        } else if (x < 0.3 && i > 0) {
          rc.push(store.log[Math.floor(r() * i)]!);
          rc.push(m);
        } else {
          rc.push(m);
        }
        await sleep(1);
      }
      // The last push may be lost: a resync (as after a reconnect) finds it.
      rc.catchUp([{ session_id: 's', max_seq: seq, read_seq: 0, unread: 0 }]);
      for (let i = 0; i < 200 && got.length < store.log.length; i++) await sleep(10);
      await sleep(50);
      await rc.close();
      assert.deepEqual(got, store.log.map((m) => m.seq));
      assert.deepEqual(delivered, got, 'every event handed over is recorded for the delivered receipts');
      assert.equal(st.gapTimeouts, 0);
      assert.equal(st.delivered, store.log.length);
    });
  }

  it('gives up on a store that never catches up: after the gap timeout the held events go out past the hole', async () => {
    const store = new FakeStore();
    store.log = [ev(1)];
    store.stored = 1;
    const got: number[] = [];
    const st = stats();
    const rc = new Receiver(new Tracker(), store.sync, 300, st, (e) => void got.push(e.seq), () => {}, () => {});
    rc.push(ev(1));
    rc.push(ev(3)); // seq 2 is pushed nowhere and never stored
    rc.push(ev(4));
    await sleep(100);
    assert.deepEqual(got, [1], 'held while the fill polls');
    for (let i = 0; i < 100 && got.length < 3; i++) await sleep(20);
    await rc.close();
    assert.deepEqual(got, [1, 3, 4]);
    assert.equal(st.gapTimeouts, 1);
  });

  it('awaits an async handler before the next event', async () => {
    const order: string[] = [];
    const rc = new Receiver(new Tracker(), new FakeStore().sync, 1000, stats(), async (e) => {
      order.push(`start ${e.seq}`);
      await sleep(20);
      order.push(`end ${e.seq}`);
    }, () => {}, () => {});
    rc.push(ev(1));
    rc.push(ev(2));
    await sleep(100);
    await rc.close();
    assert.deepEqual(order, ['start 1', 'end 1', 'start 2', 'end 2']);
    assert.deepEqual(rc.cursors(), { s: 2 });
  });
});

describe('the browser entry', () => {
  it('imports nothing but its own modules (no Node built-ins, no ws)', async () => {
    const { readFile } = await import('node:fs/promises');
    const { dirname, join } = await import('node:path');
    const { fileURLToPath } = await import('node:url');
    const src = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src');
    const seen = new Set<string>();
    const external: string[] = [];
    const walk = async (f: string) => {
      if (seen.has(f)) return;
      seen.add(f);
      for (const m of (await readFile(f, 'utf8')).matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)) {
        if (m[1]!.startsWith('.')) await walk(join(dirname(f), m[1]!));
        else external.push(`${f}: ${m[1]}`);
      }
    };
    await walk(join(src, 'index.js'));
    assert.deepEqual(external, []);
    assert.ok(seen.size > 10, `walked ${seen.size} modules`);
  });
});
