// Client message IDs and direct session IDs.
/**
 * newMessageId returns a fresh client_msg_id, a UUIDv7 (RFC 9562): 48 bits
 * of Unix milliseconds, then random bits, so IDs sort by creation time. It
 * uses the platform's crypto.getRandomValues (browsers, Node 20).
 */
export function newMessageId(now = Date.now()) {
    const b = new Uint8Array(16);
    globalThis.crypto.getRandomValues(b);
    let ms = Math.floor(now);
    for (let i = 5; i >= 0; i--) {
        b[i] = ms % 256;
        ms = Math.floor(ms / 256);
    }
    b[6] = (b[6] & 0x0f) | 0x70; // version 7
    b[8] = (b[8] & 0x3f) | 0x80; // variant 10
    const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
/**
 * directSessionId is the deterministic ID of the direct session of a and b
 * (docs/protocol.md, "Sessions and members"): "d-" + the first 16 bytes,
 * hex, of SHA-256("direct\0" + min + "\0" + max).
 */
export async function directSessionId(a, b) {
    if (b < a)
        [a, b] = [b, a];
    const data = new TextEncoder().encode(`direct\0${a}\0${b}`);
    const h = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', data));
    return 'd-' + Array.from(h.subarray(0, 16), (x) => x.toString(16).padStart(2, '0')).join('');
}
