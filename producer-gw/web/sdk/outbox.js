// The outbox keeps commands not yet answered, so a send survives a process
// restart (or, with a persistent implementation in a browser, a reload) and
// is resent with its original client_msg_id: the gateway answers such a
// resend with the first seq (duplicate: true), never a second one.
/** MemoryOutbox keeps commands in memory only: for tests, and apps that do not need sends to survive a restart. */
export class MemoryOutbox {
    live = new Map();
    async load() {
        return [...this.live.values()];
    }
    async add(frame) {
        this.live.set(frame.client_msg_id, frame);
    }
    async done(clientMsgId) {
        this.live.delete(clientMsgId);
    }
    async close() { }
}
