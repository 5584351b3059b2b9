// How the client opens a WebSocket: a Dialer returns an open Socket. The
// browser dialer uses the platform WebSocket (globalThis.WebSocket), which
// cannot set headers, so the token goes in ?access_token= (docs/protocol.md,
// "Connecting"); the Node dialer (node.ts) uses the ws package and an
// Authorization header.
import { ConnectionLostError, HandshakeError, ServerError } from './errors.js';
/**
 * adaptWebSocket waits until ws opens and returns it as a Socket. refused,
 * when set, is asked why a socket that closed before opening failed (the
 * WebSocket API does not say), and its answer is the rejection.
 */
export function adaptWebSocket(ws, signal, refused) {
    return new Promise((resolve, reject) => {
        let opened = false;
        // Frames and a close that come before the client set its handlers are
        // kept for them: in Node, ws can emit the gateway's hello (sent in the
        // same packet as the 101 response) before the promise below resolves.
        let onmessage;
        let onclose;
        const early = [];
        let closedEarly;
        let draining = false;
        const drain = () => {
            if (draining)
                return;
            draining = true;
            while (onmessage && early.length > 0)
                onmessage(early.shift());
            draining = false;
            if (onclose && closedEarly && early.length === 0) {
                const [code, reason] = closedEarly;
                closedEarly = undefined;
                onclose(code, reason);
            }
        };
        const sock = {
            send: (text) => {
                if (ws.readyState !== 1)
                    throw new ConnectionLostError('socket not open');
                ws.send(text);
            },
            close: (code, reason) => {
                try {
                    ws.close(code, reason);
                }
                catch {
                    ws.close();
                }
            },
            get onmessage() {
                return onmessage ?? ((t) => void early.push(t));
            },
            set onmessage(h) {
                onmessage = h;
                drain();
            },
            get onclose() {
                return onclose ?? ((code, reason) => void (closedEarly = [code, reason]));
            },
            set onclose(h) {
                onclose = h;
                drain();
            },
        };
        const deliver = (text) => {
            if (onmessage && early.length === 0 && !draining)
                onmessage(text);
            else {
                early.push(text);
                drain();
            }
        };
        const onAbort = () => {
            ws.close();
            reject(signal.reason ?? new Error('dial aborted'));
        };
        signal.addEventListener('abort', onAbort, { once: true });
        ws.onopen = () => {
            opened = true;
            signal.removeEventListener('abort', onAbort);
            resolve(sock);
        };
        ws.onmessage = (ev) => {
            if (typeof ev.data === 'string')
                deliver(ev.data);
            else if (ev.data instanceof ArrayBuffer || ArrayBuffer.isView(ev.data)) {
                deliver(new TextDecoder().decode(ev.data));
            }
        };
        ws.onerror = () => { };
        ws.onclose = (ev) => {
            if (opened) {
                if (onclose && early.length === 0)
                    onclose(ev.code, ev.reason);
                else {
                    closedEarly = [ev.code, ev.reason];
                    drain();
                }
                return;
            }
            signal.removeEventListener('abort', onAbort);
            const fallback = new Error(`connect failed (close ${ev.code}${ev.reason ? ` ${ev.reason}` : ''})`);
            if (!refused) {
                reject(fallback);
                return;
            }
            refused().then((e) => reject(e ?? fallback), () => reject(fallback));
        };
    });
}
/** The http(s) URL of a gateway path, from its ws(s) URL. */
export function httpURL(wsUrl, path) {
    const u = new URL(wsUrl);
    u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
    u.pathname = path;
    u.search = '';
    return u.toString();
}
/** handshakeErrorFrom turns a refused handshake's status and body into a HandshakeError. */
export function handshakeErrorFrom(status, body) {
    try {
        const f = JSON.parse(body);
        if (f && f.error && typeof f.error.code === 'number')
            return new HandshakeError(status, new ServerError(f.error));
    }
    catch {
        // not an error frame
    }
    return new HandshakeError(status);
}
/**
 * browserDialer dials with the platform WebSocket (default
 * globalThis.WebSocket), the token in ?access_token=. When a connection
 * fails before it opens it asks GET /v1/changes over HTTP with the same
 * token: a 401 or 403 there is the handshake's refusal, which the
 * WebSocket API hides.
 */
export function browserDialer(WS = globalThis.WebSocket, fetchImpl = globalThis.fetch) {
    if (!WS)
        throw new Error('no WebSocket in this environment: in Node 20 import { Client } from "@seqflow/client/node"');
    return (url, token, signal) => {
        const u = new URL(url);
        u.searchParams.set('access_token', token);
        const refused = fetchImpl
            ? async () => {
                const r = await fetchImpl(httpURL(url, '/v1/changes'), { headers: { Authorization: `Bearer ${token}` }, signal });
                if (r.status === 401 || r.status === 403)
                    return handshakeErrorFrom(r.status, await r.text());
                return undefined;
            }
            : undefined;
        return adaptWebSocket(new WS(u.toString()), signal, refused);
    };
}
