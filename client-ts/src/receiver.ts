// The receive path (client/receiver.go): pushes and sync pages become one
// ordered stream of events for the app. The tracker decides; a fill runs
// per session that needs one; a dispatcher hands the app one event at a
// time (awaiting it when the handler returns a promise), in the order the
// tracker released them, then records the event for delivered receipts.

import { TokenBucket } from './budget.js';
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
  /** Sync pages requested by fills. */
  syncPages: number;
  /** Sync pages of fills that waited for the sync budget. */
  syncsPaced: number;
}

/** How the receiver fills gaps (the client's options). */
export interface Recovery {
  gapTimeoutMs: number;
  /** How long a gap a push showed may close by pushes already in flight before a fill starts (0: at once). */
  gapWaitMs: number;
  /** Sync pages per second of all fills, with a burst of twice that. */
  syncBudget: number;
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
  private readonly budget: TokenBucket;
  /** The fills' waits in progress, ended early by close. */
  private wakers = new Set<() => void>();

  constructor(
    readonly tracker: Tracker,
    private readonly sync: Syncer,
    private readonly rc: Recovery,
    private readonly stats: ReceiverStats,
    private readonly handle: ((e: Event) => void | Promise<void>) | undefined,
    private readonly delivered: (session: string, seq: number) => void,
    private readonly onHandlerError: (e: unknown) => void,
    private readonly initial: Record<string, number> = {},
  ) {
    this.budget = new TokenBucket(rc.syncBudget, Math.max(Math.floor(2 * rc.syncBudget), 1));
  }

  /** setSelf records the user's ID (each connection's hello names it). */
  setSelf(user: string): void {
    this.tracker.self = user;
  }

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
      this.startFill(m.session_id, this.rc.gapWaitMs);
    }
  }

  /** catchUp applies a connection's changes result and starts the fills it calls for. */
  catchUp(changes: SessionChange[]): void {
    for (const s of this.tracker.catchUp(changes, Date.now())) this.startFill(s, 0);
  }

  /** release ends holding without a changes result: buffered sessions are filled as if a push showed a gap. */
  release(): void {
    this.catchUp([]);
  }

  /**
   * startFill starts a fill of session after waitMs: a gap a push showed is
   * often closed by the pushes behind it (a push path that lagged or
   * reordered), and a fill started at once would fetch what they bring.
   * The session stays marked filling meanwhile, so its later pushes do not
   * start fills of their own.
   */
  private startFill(session: string, waitMs: number): void {
    if (this.closed) {
      this.tracker.get(session).filling = false;
      return;
    }
    const p = this.fill(session, waitMs).finally(() => this.fills.delete(p));
    this.fills.add(p);
  }

  /** fill syncs session from have until the tracker says the gap is closed, polling with a growing pause while the store lags. */
  private async fill(session: string, waitMs: number): Promise<void> {
    if (waitMs > 0) {
      await this.pause(waitMs);
      if (this.closed || !this.tracker.needsFill(session)) {
        this.tracker.get(session).filling = false;
        return;
      }
    }
    let pause = this.pollMinMs;
    for (;;) {
      if (!(await this.paced())) {
        this.tracker.get(session).filling = false;
        return;
      }
      const after = this.tracker.fillFrom(session);
      this.stats.syncPages++;
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
      const res = this.tracker.synced(session, page.messages, page.hasMore, Date.now(), this.rc.gapTimeoutMs);
      this.emit(res.deliver);
      if (res.gaveUp) this.stats.gapTimeouts++;
      if (res.done) return;
      if (page.hasMore) {
        pause = this.pollMinMs;
        continue;
      }
      await this.pause(pause);
      if (this.closed) {
        this.tracker.get(session).filling = false;
        return;
      }
      pause = Math.min(2 * pause, this.pollMaxMs);
    }
  }

  /**
   * paced waits for the budget to allow one more sync page: however many
   * sessions need a fill, the client's syncs stay within it (counted in
   * stats.syncsPaced when a page had to wait). False: the receiver closed.
   */
  private async paced(): Promise<boolean> {
    const ms = this.budget.reserve();
    if (ms === 0) return true;
    this.stats.syncsPaced++;
    await this.pause(ms);
    return !this.closed;
  }

  /** pause sleeps ms, or less when the receiver closes. */
  private pause(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.wakers.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.wakers.add(done);
    });
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
    for (const wake of [...this.wakers]) wake();
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
