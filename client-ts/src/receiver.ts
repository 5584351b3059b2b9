// The receive path (client/receiver.go): pushes and sync pages become one
// ordered stream of events for the app. The tracker decides; a fill runs
// per session that needs one; a dispatcher hands the app one event at a
// time (awaiting it when the handler returns a promise), in the order the
// tracker released them, then records the event for delivered receipts.

import { ServerError } from './errors.js';
import { Tracker } from './tracker.js';
import type { Event, SessionChange } from './wire.js';

/**
 * Fetches one sync page; the client's implementation retries across
 * reconnects, so a rejection means the fill cannot go on (the client is
 * closing, or a final answer such as not_a_member).
 */
export type Syncer = (session: string, afterSeq: number) => Promise<{ messages: Event[]; hasMore: boolean }>;

export interface ReceiverStats {
  delivered: number;
  duplicatesDropped: number;
  gaps: number;
  gapTimeouts: number;
  synced: number;
}

export class Receiver {
  pollMinMs = 20;
  pollMaxMs = 500;
  private queue: Event[] = [];
  private dispatching = false;
  private closed = false;
  private fills = new Set<Promise<void>>();
  /** Per session, the highest seq handed to the app. */
  private handed = new Map<string, number>();

  constructor(
    readonly tracker: Tracker,
    private readonly sync: Syncer,
    private readonly gapTimeoutMs: number,
    private readonly stats: ReceiverStats,
    private readonly handle: ((e: Event) => void | Promise<void>) | undefined,
    private readonly delivered: (session: string, seq: number) => void,
    private readonly onHandlerError: (e: unknown) => void,
    private readonly initial: Record<string, number> = {},
  ) {}

  /** hold buffers pushes until catchUp: called when a connection opens. */
  hold(): void {
    this.tracker.holding = true;
  }

  push(m: Event): void {
    const res = this.tracker.push(m, Date.now());
    if (res.duplicate) this.stats.duplicatesDropped++;
    this.emit(res.deliver);
    if (res.startFill) {
      this.stats.gaps++;
      this.startFill(m.session_id);
    }
  }

  /** catchUp applies a connection's changes result and starts the fills it calls for. */
  catchUp(changes: SessionChange[]): void {
    for (const s of this.tracker.catchUp(changes, Date.now())) this.startFill(s);
  }

  /** release ends holding without a changes result: buffered sessions are filled as if a push showed a gap. */
  release(): void {
    this.catchUp([]);
  }

  private startFill(session: string): void {
    if (this.closed) {
      this.tracker.get(session).filling = false;
      return;
    }
    const p = this.fill(session).finally(() => this.fills.delete(p));
    this.fills.add(p);
  }

  /** fill syncs session from have until the tracker says the gap is closed, polling with a growing pause while the store lags. */
  private async fill(session: string): Promise<void> {
    let pause = this.pollMinMs;
    for (;;) {
      const after = this.tracker.fillFrom(session);
      let page: { messages: Event[]; hasMore: boolean };
      try {
        page = await this.sync(session, after);
      } catch (e) {
        if (e instanceof ServerError) this.tracker.abandon(session); // e.g. not_a_member: the user left
        else this.tracker.get(session).filling = false; // closing; the next client catches up
        return;
      }
      if (this.closed) {
        this.tracker.get(session).filling = false;
        return;
      }
      this.stats.synced += page.messages.length;
      const res = this.tracker.synced(session, page.messages, page.hasMore, Date.now(), this.gapTimeoutMs);
      this.emit(res.deliver);
      if (res.gaveUp) this.stats.gapTimeouts++;
      if (res.done) return;
      if (page.hasMore) {
        pause = this.pollMinMs;
        continue;
      }
      await sleep(pause);
      if (this.closed) {
        this.tracker.get(session).filling = false;
        return;
      }
      pause = Math.min(2 * pause, this.pollMaxMs);
    }
  }

  private emit(ms: Event[]): void {
    if (ms.length === 0) return;
    this.queue.push(...ms);
    if (!this.dispatching) void this.dispatch();
  }

  private async dispatch(): Promise<void> {
    this.dispatching = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const m = this.queue.shift()!;
        if (this.handle) {
          try {
            await this.handle(m);
          } catch (e) {
            this.onHandlerError(e);
          }
        }
        this.stats.delivered++;
        this.handed.set(m.session_id, m.seq);
        this.delivered(m.session_id, m.seq);
      }
    } finally {
      this.dispatching = false;
    }
  }

  /** close stops the fills and the dispatcher (events not yet handed over are dropped: the cursors say where to resume). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.fills]);
  }

  /**
   * Per session, the highest seq handed to the app (its handler returned):
   * what a later client passes as cursors to resume after. The sessions of
   * the cursors it started with are included.
   */
  cursors(): Record<string, number> {
    const out: Record<string, number> = { ...this.initial };
    for (const [id, seq] of this.handed) out[id] = seq;
    return out;
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
