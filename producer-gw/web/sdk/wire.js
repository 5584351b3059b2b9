// The JSON frames of the gateway protocol (docs/protocol.md; the Go types
// are in internal/wire). Only what the SDK reads or sends is typed; unknown
// fields are kept as they come.
/** Why a frame is refused by decodeFrame. */
export class BadFrameError extends Error {
    name = 'BadFrameError';
}
/**
 * decodeFrame parses one gateway frame and checks what the client relies
 * on: an op, an event with a session and a positive seq, an error body on
 * error frames, ACK fields on ok ACKs, positive seqs in sync pages.
 */
export function decodeFrame(text) {
    let f;
    try {
        f = JSON.parse(text);
    }
    catch (e) {
        throw new BadFrameError(`bad server frame: ${e.message}`);
    }
    if (typeof f !== 'object' || f === null || Array.isArray(f))
        throw new BadFrameError('bad server frame: not an object');
    const fr = f;
    if (typeof fr.op !== 'string' || fr.op === '')
        throw new BadFrameError('bad server frame: no op');
    switch (fr.op) {
        case 'event':
            if (!fr.event || typeof fr.event.session_id !== 'string' || fr.event.session_id === '' || !(fr.event.seq > 0))
                throw new BadFrameError('bad server frame: event without session or seq');
            break;
        case 'error':
            if (!fr.error || typeof fr.error.code !== 'number')
                throw new BadFrameError('bad server frame: error frame without error');
            break;
        case 'ack':
        case 'seq_notice':
            if (!fr.client_msg_id)
                throw new BadFrameError(`bad server frame: ${fr.op} without client_msg_id`);
            if (fr.status === 'ok' && !((fr.seq ?? 0) > 0))
                throw new BadFrameError(`bad server frame: ok ${fr.op} without seq`);
            break;
        case 'result':
            for (const m of fr.messages ?? []) {
                if (!(m.seq > 0))
                    throw new BadFrameError(`bad server frame: sync result with seq ${m.seq}`);
            }
            break;
    }
    return fr;
}
