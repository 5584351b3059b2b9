// One connection to a gateway: frames out in the order they are sent,
// answers routed to requests by req_id, everything else to the client, an
// application ping every heartbeat_ms (no pong within two heartbeats drops
// the connection), and why it died.
import { ConnectionLostError, ReplacedError, ServerError, SignedOutError } from './errors.js';
import { decodeFrame } from './wire.js';
/** Close codes of docs/protocol.md, "Close codes". */
export const CloseCode = {
    normal: 1000,
    reconnect: 1012,
    idleTimeout: 4000,
    tokenExpired: 4001,
    signedOut: 4002,
    replaced: 4003,
    slowConsumer: 4008,
};
export class Conn {
    sock;
    handle;
    hello;
    /** Resolves, never rejects, with why the connection died. */
    closed;
    cause;
    finish;
    waiters = new Map();
    nextReq = 0;
    heartbeat;
    constructor(sock, hello, handle) {
        this.sock = sock;
        this.handle = handle;
        this.hello = hello;
        this.closed = new Promise((r) => (this.finish = r));
    }
    /**
     * open waits up to helloTimeoutMs for the gateway's hello on sock, then
     * routes frames: answers to requests, the rest to handle.
     */
    static open(sock, handle, helloTimeoutMs = 10_000) {
        return new Promise((resolve, reject) => {
            const timer = setTimeout(() => {
                sock.close(1000, '');
                reject(new Error(`no hello within ${helloTimeoutMs} ms`));
            }, helloTimeoutMs);
            sock.onclose = (code, reason) => {
                clearTimeout(timer);
                reject(closeError(code, reason));
            };
            sock.onmessage = (text) => {
                clearTimeout(timer);
                let f;
                try {
                    f = decodeFrame(text);
                }
                catch (e) {
                    sock.close(1000, '');
                    reject(e);
                    return;
                }
                if (f.op !== 'hello') {
                    sock.close(1000, '');
                    reject(new Error(`first frame is not hello: ${text.slice(0, 200)}`));
                    return;
                }
                const c = new Conn(sock, f, handle);
                sock.onmessage = (t) => c.onText(t);
                sock.onclose = (code, reason) => c.kill(closeError(code, reason));
                c.startHeartbeat();
                resolve(c);
            };
        });
    }
    get dead() {
        return this.cause !== undefined;
    }
    onText(text) {
        if (this.dead)
            return;
        let f;
        try {
            f = decodeFrame(text);
        }
        catch (e) {
            this.kill(e);
            return;
        }
        if (f.req_id) {
            const w = this.waiters.get(f.req_id);
            if (w) {
                this.waiters.delete(f.req_id);
                clearTimeout(w.timer);
                w.resolve(f);
                return;
            }
        }
        this.handle(f);
    }
    startHeartbeat() {
        const every = (this.hello.heartbeat_ms ?? 0) > 0 ? this.hello.heartbeat_ms : 15_000;
        this.heartbeat = setInterval(() => {
            this.request({ op: 'ping' }, 2 * every).catch((e) => {
                if (!this.dead)
                    this.kill(new ConnectionLostError(`no pong within ${2 * every} ms: ${e.message}`));
            });
        }, every);
    }
    /** Sends a frame; throws ConnectionLostError when the connection is dead. */
    send(f) {
        if (this.dead)
            throw new ConnectionLostError();
        try {
            this.sock.send(JSON.stringify(f));
        }
        catch (e) {
            this.kill(new ConnectionLostError(`write: ${e.message}`));
            throw new ConnectionLostError();
        }
    }
    /**
     * request sends f with a fresh req_id and resolves with the frame
     * answering it; an error frame rejects with ServerError, a dead
     * connection with ConnectionLostError, no answer within timeoutMs with
     * a timeout Error.
     */
    request(f, timeoutMs) {
        if (this.dead)
            return Promise.reject(new ConnectionLostError());
        const id = 'q' + (++this.nextReq).toString(36);
        return new Promise((resolve, reject) => {
            const timer = setTimeout(() => {
                this.waiters.delete(id);
                reject(new Error(`no answer to ${f.op} within ${timeoutMs} ms`));
            }, timeoutMs);
            this.waiters.set(id, {
                resolve: (r) => (r.op === 'error' && r.error ? reject(new ServerError(r.error, r.client_msg_id)) : resolve(r)),
                reject,
                timer,
            });
            try {
                this.send({ ...f, req_id: id });
            }
            catch (e) {
                this.waiters.delete(id);
                clearTimeout(timer);
                reject(e);
            }
        });
    }
    /** kill ends the connection with cause (the first cause wins). */
    kill(cause) {
        if (this.dead)
            return;
        this.cause = cause;
        clearInterval(this.heartbeat);
        for (const [, w] of this.waiters) {
            clearTimeout(w.timer);
            w.reject(new ConnectionLostError());
        }
        this.waiters.clear();
        this.sock.onmessage = () => { };
        this.sock.onclose = () => { };
        this.sock.close(1000, '');
        this.finish(cause);
    }
}
/** closeError maps a close code to why the connection ended. */
export function closeError(code, reason) {
    if (code === CloseCode.signedOut)
        return new SignedOutError();
    if (code === CloseCode.replaced)
        return new ReplacedError();
    return new ConnectionLostError(`closed ${code}${reason ? ` ${reason}` : ''}`);
}
