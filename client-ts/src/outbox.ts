// The outbox keeps commands not yet answered, so a send survives a process
// restart (or, with a persistent implementation in a browser, a reload) and
// is resent with its original client_msg_id: the gateway answers such a
// resend with the first seq (duplicate: true), never a second one.

import type { ClientFrame } from './wire.js';

/**
 * Outbox is where the client records commands before it first sends them.
 * One outbox belongs to one client (one user and device) at a time.
 *
 * - load is called once, before the first connection; it returns the
 *   commands still pending, in posting order.
 * - add must make the command durable before it resolves: the client
 *   sends the command only after add resolved (a crash after that resends
 *   it; a crash before it means the app never got a Pending back).
 * - done records that a command was answered (an ok ACK or a final
 *   error). It need not be durable at once: a lost done costs one resend
 *   the gateway answers as a duplicate.
 * - close releases the storage; no call follows it.
 */
export interface Outbox {
  load(): Promise<ClientFrame[]>;
  add(frame: ClientFrame): Promise<void>;
  done(clientMsgId: string): Promise<void>;
  close(): Promise<void>;
}

/** MemoryOutbox keeps commands in memory only: for tests, and apps that do not need sends to survive a restart. */
export class MemoryOutbox implements Outbox {
  readonly live = new Map<string, ClientFrame>();
  async load(): Promise<ClientFrame[]> {
    return [...this.live.values()];
  }
  async add(frame: ClientFrame): Promise<void> {
    this.live.set(frame.client_msg_id!, frame);
  }
  async done(clientMsgId: string): Promise<void> {
    this.live.delete(clientMsgId);
  }
  async close(): Promise<void> {}
}
