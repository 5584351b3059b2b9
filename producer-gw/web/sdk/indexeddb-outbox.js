// The outbox of a browser: commands in an IndexedDB database, so a send
// survives a reload (or a crashed tab) and is resent with its original
// client_msg_id by the next page's client. Records are kept in posting
// order (an auto-incremented key); an add commits with strict durability
// (Chromium flushes it to disk before the transaction completes) before
// the client sends the command.
import { ClosedError } from './errors.js';
const store = 'commands';
/**
 * IndexedDBOutbox keeps commands in the IndexedDB database `name` of the
 * page's origin. Use one name per user and device (for example
 * `seqflow-outbox:alice:web`): one outbox belongs to one client at a time.
 */
export class IndexedDBOutbox {
    name;
    factory;
    db;
    closed = false;
    constructor(name, factory = globalThis.indexedDB) {
        this.name = name;
        this.factory = factory;
        if (!factory)
            throw new Error('no indexedDB in this environment');
    }
    open() {
        if (this.closed)
            return Promise.reject(new ClosedError());
        if (this.db)
            return Promise.resolve(this.db);
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
    async tx(mode, durable, body) {
        const db = await this.open();
        return new Promise((resolve, reject) => {
            const t = durable ? db.transaction(store, mode, { durability: 'strict' }) : db.transaction(store, mode);
            let value;
            const req = body(t.objectStore(store));
            if (req)
                req.onsuccess = () => (value = req.result);
            t.oncomplete = () => resolve(value);
            t.onerror = () => reject(t.error ?? new Error('IndexedDB transaction failed'));
            t.onabort = () => reject(t.error ?? new Error('IndexedDB transaction aborted'));
        });
    }
    async load() {
        const rows = (await this.tx('readonly', false, (os) => os.getAll())) ?? [];
        return rows.sort((a, b) => (a.n ?? 0) - (b.n ?? 0)).map((r) => r.frame);
    }
    async add(frame) {
        const id = frame.client_msg_id;
        await this.tx('readwrite', true, (os) => {
            // A command already recorded (the same client_msg_id posted again)
            // keeps its place.
            const get = os.index('id').getKey(id);
            get.onsuccess = () => {
                if (get.result === undefined)
                    os.add({ id, frame });
            };
            return undefined;
        });
    }
    async done(clientMsgId) {
        await this.tx('readwrite', false, (os) => {
            const get = os.index('id').getKey(clientMsgId);
            get.onsuccess = () => {
                if (get.result !== undefined)
                    os.delete(get.result);
            };
            return undefined;
        });
    }
    async close() {
        this.closed = true;
        this.db?.close();
        this.db = undefined;
    }
}
