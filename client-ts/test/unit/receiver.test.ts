import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Receiver, type Recovery } from '../../src/receiver.js';
import { Tracker } from '../../src/tracker.js';
import type { Event } from '../../src/wire.js';

const ev = (seq: number, session = 's'): Event => ({ session_id: session, seq, msg_id: String(seq), sender_user_id: 'u', server_ts: 0, kind: 'message' });
/** A membership event of session s at seq that adds or removes user. */
const membership = (seq: number, action: string, user: string): Event => ({ ...ev(seq), kind: 'membership', action, user_ids: [user] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stats = () => ({ delivered: 0, duplicatesDropped: 0, gaps: 0, gapTimeouts: 0, synced: 0, syncPages: 0, syncsPaced: 0 });
/** The receiver's recovery with the client's defaults but the gap timeout. */
const recovery = (gapTimeoutMs: number): Recovery => ({ gapTimeoutMs, gapWaitMs: 250, syncBudget: 10 });
const rethrow = (e: unknown) => {
  throw e;
};

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
  /** Sync pages asked for. */
  pages = 0;
  sync = async (_session: string, after: number) => {
    this.pages++;
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
      const rc = new Receiver(new Tracker(), store.sync, recovery(3_600_000), st, (e) => void got.push(e.seq), (_s, q) => void delivered.push(q), (e) => {
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
    const rc = new Receiver(new Tracker(), store.sync, recovery(300), st, (e) => void got.push(e.seq), () => {}, () => {});
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
    const rc = new Receiver(new Tracker(), new FakeStore().sync, recovery(1000), stats(), async (e) => {
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

  it('waits for pushes in flight: a gap they close costs no sync, one they do not is filled after the gap wait', async () => {
    const store = new FakeStore();
    store.log = [1, 2, 3, 4, 5, 6].map((q) => ev(q));
    store.stored = 6;
    const got: number[] = [];
    const rc = new Receiver(new Tracker(), store.sync, recovery(3_600_000), stats(), (e) => void got.push(e.seq), () => {}, rethrow);
    rc.push(ev(1));
    rc.push(ev(3)); // 2 is behind it on the push path
    await sleep(100);
    rc.push(ev(2));
    await sleep(500);
    assert.deepEqual(got, [1, 2, 3]);
    assert.equal(store.pages, 0, 'a gap closed by a push in flight was synced');
    rc.push(ev(6)); // 4 and 5 were lost
    await sleep(200);
    assert.equal(store.pages, 0, 'a fill started before the gap wait was over');
    for (let i = 0; i < 100 && got.length < 6; i++) await sleep(20);
    await rc.close();
    assert.deepEqual(got, [1, 2, 3, 4, 5, 6], 'a gap no push closed is filled');
    assert.ok(store.pages > 0);
  });

  describe('resumes at re-add: a member removed and added back is handed its removal, then its re-add and what follows', () => {
    const log = [ev(1), membership(2, 'remove', 'me')];
    for (let q = 3; q < 40; q++) log.push(ev(q));
    log.push(membership(40, 'add', 'me'), ev(41));
    const want = [1, 2, 40, 41];

    it('pushed: no sync at all', async () => {
      const store = new FakeStore();
      store.log = log;
      store.stored = log.length;
      const got: number[] = [];
      const tr = new Tracker();
      tr.self = 'me';
      const rc = new Receiver(tr, store.sync, recovery(3_600_000), stats(), (e) => void got.push(e.seq), () => {}, rethrow);
      rc.push(log[0]!);
      rc.push(log[1]!);
      rc.push(log.at(-2)!); // nothing is pushed to a non-member
      rc.push(log.at(-1)!);
      await sleep(600); // past the gap wait
      await rc.close();
      assert.deepEqual(got, want);
      assert.equal(store.pages, 0, 'the absence was synced');
    });

    it('filled: the events of the absence are not handed over', async () => {
      const store = new FakeStore();
      store.log = log;
      store.stored = log.length;
      const got: number[] = [];
      const tr = new Tracker({ s: 0 });
      tr.self = 'me';
      const rc = new Receiver(tr, store.sync, recovery(3_600_000), stats(), (e) => void got.push(e.seq), () => {}, rethrow);
      rc.catchUp([{ session_id: 's', max_seq: 41, read_seq: 0, unread: 0 }]); // offline through it all
      for (let i = 0; i < 100 && tr.cursor('s') < 41; i++) await sleep(20);
      await sleep(20);
      await rc.close();
      assert.deepEqual(got, want);
    });

    it("another user's removal: everything is handed over", async () => {
      const store = new FakeStore();
      store.log = log;
      store.stored = log.length;
      const got: number[] = [];
      const tr = new Tracker({ s: 0 });
      tr.self = 'someone else';
      const rc = new Receiver(tr, store.sync, recovery(3_600_000), stats(), (e) => void got.push(e.seq), () => {}, rethrow);
      rc.catchUp([{ session_id: 's', max_seq: 41, read_seq: 0, unread: 0 }]);
      for (let i = 0; i < 100 && got.length < log.length; i++) await sleep(20);
      await rc.close();
      assert.deepEqual(got, log.map((m) => m.seq));
    });
  });

  it('keeps to the sync budget however many sessions need a fill at once, and still fills every one', async () => {
    // 16 sessions of 10 events take 3 pages of 4 each: 48 pages at 10 a
    // second after a burst of 20.
    const sessions = 16;
    const stores = new Map<string, FakeStore>();
    const changes = [];
    for (let i = 0; i < sessions; i++) {
      const id = `s${String(i).padStart(2, '0')}`;
      const st = new FakeStore();
      for (let q = 1; q <= 10; q++) st.log.push(ev(q, id));
      st.stored = st.log.length;
      stores.set(id, st);
      changes.push({ session_id: id, max_seq: 10, read_seq: 0, unread: 0 });
    }
    const pages: number[] = [];
    const sync = (session: string, after: number) => {
      pages.push(Date.now());
      return stores.get(session)!.sync(session, after);
    };
    let got = 0;
    const st = stats();
    const rc = new Receiver(new Tracker(), sync, recovery(3_600_000), st, () => void got++, () => {}, rethrow);
    const start = Date.now();
    rc.catchUp(changes);
    for (let i = 0; i < 250 && got < sessions * 10; i++) await sleep(20);
    await rc.close();
    assert.equal(got, sessions * 10);
    // A late timer only makes the pages later: the bound holds however
    // busy the machine is.
    for (const w of [500, 1_000, 2_000]) {
      const n = pages.filter((p) => p - start < w).length;
      const limit = 20 + (10 * w) / 1000;
      assert.ok(n <= limit, `${n} sync pages in the first ${w} ms, budget ${limit}`);
    }
    assert.ok(st.syncsPaced > 0, 'no page waited for the budget');
    assert.equal(st.syncPages, pages.length);
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
