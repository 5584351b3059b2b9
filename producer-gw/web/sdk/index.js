// @seqflow/client: the TypeScript SDK of seqflow for browsers and Node.
// This entry imports nothing of Node; @seqflow/client/node adds the ws
// dialer and the file outbox.
export { Client, text, wsURL } from './client.js';
export { Pending } from './sender.js';
export { ClosedError, ConnectionLostError, ErrorCode, HandshakeError, ReplacedError, ServerError, SignedOutError, isAuth, isRetryable, isSignedOut, } from './errors.js';
export { MemoryOutbox } from './outbox.js';
export { IndexedDBOutbox } from './indexeddb-outbox.js';
export { adaptWebSocket, browserDialer } from './transport.js';
export { CloseCode } from './conn.js';
export { directSessionId, newMessageId } from './ids.js';
export { backoffDelay } from './backoff.js';
export { Tracker } from './tracker.js';
