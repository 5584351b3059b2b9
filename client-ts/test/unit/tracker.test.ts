import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Tracker } from '../../src/tracker.js';
import type { Event } from '../../src/wire.js';

const ev = (seq: number, session = 's'): Event => ({
  session_id: session,
  seq,
  msg_id: String(seq),
  sender_user_id: 'u',
  server_ts: 0,
  kind: 'message',
});
const seqs = (es: Event[]) => es.map((e) => e.seq);
/** An event of session s at seq of kind and action, naming users. */
const naming = (seq: number, kind: string, action: string, users: string[]): Event => ({ ...ev(seq), kind, action, user_ids: users });

describe('Tracker', () => {
  it('delivers the next seq at once and drops duplicates', () => {
    const t = new Tracker();
    assert.deepEqual(seqs(t.push(ev(1), 0).deliver), [1]);
    assert.equal(t.push(ev(1), 0).duplicate, true);
    assert.deepEqual(seqs(t.push(ev(2), 0).deliver), [2]);
    assert.equal(t.cursor('s'), 2);
  });

  it('holds events after a gap, asks for one fill, and releases in order when the sync fills it', () => {
    const t = new Tracker({ s: 1 });
    const r = t.push(ev(4), 0);
    assert.deepEqual(r.deliver, []);
    assert.equal(r.startFill, true);
    assert.equal(t.push(ev(5), 0).startFill, false, 'a second push during the fill starts no second fill');
    assert.equal(t.push(ev(5), 0).duplicate, true, 'a buffered event pushed again is a duplicate');
    assert.equal(t.fillFrom('s'), 1);
    const s = t.synced('s', [ev(2), ev(3), ev(4)], false, 10, 10_000);
    assert.deepEqual(seqs(s.deliver), [2, 3, 4, 5]);
    assert.equal(s.done, true);
  });

  it('treats a hole the store answered past as empty (seqs may have gaps)', () => {
    const t = new Tracker({ s: 1 });
    t.push(ev(5), 0);
    const s = t.synced('s', [ev(3), ev(5)], false, 1, 10_000);
    assert.deepEqual(seqs(s.deliver), [3, 5]);
    assert.equal(s.done, true);
  });

  it('keeps polling while the store lags, then gives up past the gap timeout', () => {
    const t = new Tracker({ s: 1 });
    t.push(ev(4), 100);
    let s = t.synced('s', [], false, 200, 1_000);
    assert.equal(s.done, false);
    assert.deepEqual(s.deliver, []);
    s = t.synced('s', [], false, 1_100, 1_000);
    assert.equal(s.gaveUp, true);
    assert.deepEqual(seqs(s.deliver), [4]);
    assert.equal(t.push(ev(2), 1_200).duplicate, true, 'an event of the hole that turns up later is dropped');
  });

  it('holds pushes during catch-up and fills every session whose max_seq is ahead', () => {
    const t = new Tracker({ a: 3 });
    t.holding = true;
    const r = t.push(ev(6, 'a'), 0);
    assert.equal(r.startFill, false, 'no fill while holding');
    const fill = t.catchUp(
      [
        { session_id: 'a', max_seq: 6, read_seq: 0, unread: 0 },
        { session_id: 'b', max_seq: 2, read_seq: 0, unread: 0 },
        { session_id: 'c', max_seq: 0, read_seq: 0, unread: 0 },
      ],
      0,
    );
    assert.deepEqual(fill, ['a', 'b']);
    assert.equal(t.holding, false);
  });

  it('skips what follows the removal of self until an event adds it back: a membership add, a group join, a session create', () => {
    for (const readd of [naming(6, 'membership', 'add', ['me']), naming(6, 'group', 'join', ['me']), naming(6, 'session_create', '', ['x', 'me'])]) {
      const t = new Tracker({ s: 1 });
      t.self = 'me';
      const away = [naming(2, 'membership', 'remove', ['x', 'me']), ev(3), naming(4, 'membership', 'add', ['x']), naming(5, 'group', 'join', ['y'])];
      const s = t.synced('s', [...away, readd, ev(7)], false, 0, 10_000);
      assert.deepEqual(seqs(s.deliver), [2, 6, 7], `re-added by ${readd.kind}`);
      assert.equal(t.cursor('s'), 7);
    }
  });

  it('jumps to a pushed re-add while away, dropping what is held below it, with no fill', () => {
    const t = new Tracker({ s: 1 });
    t.self = 'me';
    assert.deepEqual(seqs(t.push(naming(2, 'membership', 'remove', ['me']), 0).deliver), [2]);
    assert.equal(t.push(ev(5), 0).startFill, true, 'an event after the removal shows a gap');
    const r = t.push(naming(9, 'membership', 'add', ['me']), 0);
    assert.deepEqual(seqs(r.deliver), [9]);
    assert.equal(t.needsFill('s'), false, 'nothing left to fill');
    assert.deepEqual(seqs(t.push(ev(10), 0).deliver), [10]);
  });

  it('skipHistory starts unknown sessions at their latest seq', () => {
    const t = new Tracker({}, true);
    assert.deepEqual(t.catchUp([{ session_id: 'x', max_seq: 9, read_seq: 0, unread: 0 }], 0), []);
    assert.deepEqual(seqs(t.push(ev(10, 'x'), 0).deliver), [10]);
    assert.deepEqual(seqs(t.push(ev(5, 'y'), 0).deliver), [5], 'a first push of an unknown session starts there');
  });
});
