// The outbox of a browser: commands in an IndexedDB database, so a send
// survives a reload (or a crashed tab) and is resent with its original
// client_msg_id by the next page's client. Records are kept in posting
// order (an auto-incremented key); an add commits with strict durability
// (Chromium flushes it to disk before the transaction completes) before
// the client sends the command.

import { ClosedError } from './errors.js';
import type { Outbox } from './outbox.js';
import type { ClientFrame } from './wire.js';

const store = 'commands';

interface Row {
  n?: number;
  id: string;
  frame: ClientFrame;
}

/**
 * IndexedDBOutbox keeps commands in the IndexedDB database `name` of the
 * page's origin. Use one name per user and device (for example
 * `seqflow-outbox:alice:web`): one outbox belongs to one client at a time.
 */
export class IndexedDBOutbox implements Outbox {
  private db: IDBDatabase | undefined;
  private closed = false;

  constructor(
    readonly name: string,
    private readonly factory: IDBFactory = (globalThis as any).indexedDB,
  ) {
    if (!factory) throw new Error('no indexedDB in this environment');
  }

  private open(): Promise<IDBDatabase> {
    if (this.closed) return Promise.reject(new ClosedError());
    if (this.db) return Promise.resolve(this.db);
    return new Promise((resolve, reject) => {
      const req = this.factory.open(this.name, 1);
      req.onupgradeneeded = () => {
        const os = req.result.createObjectStore(store, { keyPath: 'n', autoIncrement: true });
        os.createIndex('id', 'id', { unique: true });
      };
      req.onsuccess = () => {
        this.db = req.result;
        resolve(req.result);
      };
      req.onerror = () => reject(req.error ?? new Error(`open IndexedDB ${this.name}`));
      req.onblocked = () => reject(new Error(`open IndexedDB ${this.name}: blocked by another connection`));
    });
  }

  /** tx runs body in one transaction and resolves once it has committed. */
  private async tx<T>(mode: IDBTransactionMode, durable: boolean, body: (os: IDBObjectStore) => IDBRequest<T> | undefined): Promise<T | undefined> {
    const db = await this.open();
    return new Promise((resolve, reject) => {
      const t = durable ? db.transaction(store, mode, { durability: 'strict' }) : db.transaction(store, mode);
      let value: T | undefined;
      const req = body(t.objectStore(store));
      if (req) req.onsuccess = () => (value = req.result);
      t.oncomplete = () => resolve(value);
      t.onerror = () => reject(t.error ?? new Error('IndexedDB transaction failed'));
      t.onabort = () => reject(t.error ?? new Error('IndexedDB transaction aborted'));
    });
  }

  async load(): Promise<ClientFrame[]> {
    const rows = (await this.tx<Row[]>('readonly', false, (os) => os.getAll())) ?? [];
    return rows.sort((a, b) => (a.n ?? 0) - (b.n ?? 0)).map((r) => r.frame);
  }

  async add(frame: ClientFrame): Promise<void> {
    const id = frame.client_msg_id!;
    await this.tx('readwrite', true, (os) => {
      // A command already recorded (the same client_msg_id posted again)
      // keeps its place.
      const get = os.index('id').getKey(id);
      get.onsuccess = () => {
        if (get.result === undefined) os.add({ id, frame } satisfies Row);
      };
      return undefined;
    });
  }

  async done(clientMsgId: string): Promise<void> {
    await this.tx('readwrite', false, (os) => {
      const get = os.index('id').getKey(clientMsgId);
      get.onsuccess = () => {
        if (get.result !== undefined) os.delete(get.result);
      };
      return undefined;
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.db?.close();
    this.db = undefined;
  }
}
