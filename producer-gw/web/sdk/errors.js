// Errors of the SDK: the gateway's error frames with the registry's stable
// codes (docs/protocol.md, "Errors"; ErrorCode in
// schemas/proto/seqflow/im/v1/errors.proto), a refused handshake, and the
// client's own conditions. isRetryable and isAuth classify any of them.
/** The registry's stable error codes, by name (docs/protocol.md, "Errors"). */
export const ErrorCode = {
    bad_frame: 1001,
    missing_field: 1002,
    invalid_utf8: 1003,
    unknown_type: 1004,
    too_large: 1005,
    invalid_field: 1006,
    ambiguous_json: 1007,
    unauthenticated: 2001,
    token_expired: 2002,
    forbidden: 2003,
    signed_out: 2004,
    rate_limited: 3001,
    too_many_in_flight: 3002,
    frame_too_large: 3003,
    not_a_member: 4001,
    edit_window_closed: 4002,
    session_exists: 4003,
    session_not_found: 4004,
    not_own_message: 4005,
    message_not_found: 4006,
    not_permitted: 4007,
    muted: 4008,
    group_dissolved: 4009,
    group_full: 4010,
    unavailable: 5001,
    timeout: 5002,
    internal: 5003,
    shutting_down: 5004,
    undecodable: 6001,
    constraint: 6002,
};
/**
 * An error frame of the gateway: the registry's stable code and name, its
 * message, and whether the same request, unchanged, can succeed when
 * retried. Retryable ones are retried by the client and surface only in
 * stats; a ServerError a caller sees is final.
 */
export class ServerError extends Error {
    name = 'ServerError';
    code;
    /** The registry name: not_a_member, muted, ... */
    errorName;
    detail;
    retryable;
    /** Set when the error answers a command. */
    clientMsgId;
    constructor(body, clientMsgId) {
        super(`${body.name} (${body.code})${clientMsgId ? ` for ${clientMsgId}` : ''}: ${body.message}`);
        this.code = body.code;
        this.errorName = body.name;
        this.detail = body.message;
        this.retryable = body.retryable;
        this.clientMsgId = clientMsgId;
    }
}
/**
 * A refused WebSocket handshake: the HTTP status and, when the gateway sent
 * one, its error (unauthenticated, token_expired, signed_out). Browsers do
 * not show a refused handshake's status; there the client asks the gateway
 * over HTTP with the same token to learn it (see transport.ts).
 */
export class HandshakeError extends Error {
    status;
    serverError;
    name = 'HandshakeError';
    constructor(status, serverError) {
        super(`handshake refused with HTTP ${status}${serverError ? `: ${serverError.message}` : ''}`);
        this.status = status;
        this.serverError = serverError;
    }
}
/** Calls made after the client closed, and commands in flight when it closed (an outbox keeps them). */
export class ClosedError extends Error {
    name = 'ClosedError';
    constructor() {
        super('client closed');
    }
}
/** A request whose connection dropped before its answer; the client retries these on the next connection. */
export class ConnectionLostError extends Error {
    reason;
    name = 'ConnectionLostError';
    constructor(reason = 'connection lost') {
        super(reason);
        this.reason = reason;
    }
}
/** The connection was closed with 4002 signed_out: the token never works again; do not reconnect. */
export class SignedOutError extends Error {
    name = 'SignedOutError';
    constructor() {
        super('device signed out: sign in again for a new token');
    }
}
/** The connection was closed with 4003 replaced by the login policy: do not reconnect by yourself. */
export class ReplacedError extends Error {
    name = 'ReplacedError';
    constructor() {
        super('replaced by a newer connection (login policy)');
    }
}
/**
 * Whether retrying what failed with err can succeed: a retryable server
 * error, a lost connection, or a handshake refused for a reason other than
 * the token or the request (5xx, 429).
 */
export function isRetryable(err) {
    if (err instanceof HandshakeError)
        return err.status === 429 || err.status >= 500 || err.status === 0;
    if (err instanceof ServerError)
        return err.retryable;
    return err instanceof ConnectionLostError;
}
/** Whether err means the token was refused: a new token is needed before reconnecting can succeed. */
export function isAuth(err) {
    if (err instanceof HandshakeError && err.status === 401)
        return true;
    if (err instanceof SignedOutError)
        return true;
    return (err instanceof ServerError &&
        (err.errorName === 'unauthenticated' || err.errorName === 'token_expired' || err.errorName === 'signed_out'));
}
/** Whether err means the device was signed out (close 4002, or 401 signed_out at the handshake). */
export function isSignedOut(err) {
    if (err instanceof SignedOutError)
        return true;
    if (err instanceof HandshakeError)
        return err.serverError?.errorName === 'signed_out';
    return err instanceof ServerError && err.errorName === 'signed_out';
}
