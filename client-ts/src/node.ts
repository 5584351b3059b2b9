// @seqflow/client/node: the SDK in Node 20, which has no WebSocket of its
// own. Everything of @seqflow/client, plus a dialer on the ws package (the
// token in an Authorization header, a refused handshake's status and error
// read from its response) and the file outbox.

import WebSocket from 'ws';
import { Client as BaseClient, type ClientOptions } from './client.js';
import { FileOutbox } from './file-outbox.js';
import { adaptWebSocket, handshakeErrorFrom, type Dialer, type WebSocketLike } from './transport.js';

export * from './index.js';
export { FileOutbox };

/** nodeDialer dials with the ws package, the token in an Authorization header. */
export function nodeDialer(): Dialer {
  return (url, token, signal) => {
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` }, maxPayload: 8 << 20 });
    // A refused handshake: read the gateway's error body, then end the
    // attempt (ws leaves that to a listener of unexpected-response).
    let refusal: Promise<Error> | undefined;
    ws.on('unexpected-response', (_req, res) => {
      refusal = new Promise<Error>((resolve) => {
        let body = '';
        const done = () => {
          resolve(handshakeErrorFrom(res.statusCode ?? 0, body));
          ws.terminate(); // emits close: adaptWebSocket asks refused()
        };
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          if (body.length < 4096) body += c;
        });
        res.on('end', done);
        res.on('error', done);
      });
    });
    return adaptWebSocket(ws as unknown as WebSocketLike, signal, async () => refusal && (await refusal));
  };
}

/** Options in Node: outboxPath is a shorthand for outbox: new FileOutbox(outboxPath). */
export interface NodeClientOptions extends ClientOptions {
  outboxPath?: string;
}

/** Client in Node: dials with ws unless another dialer is given. */
export class Client extends BaseClient {
  constructor(opts: NodeClientOptions) {
    const o: ClientOptions = { dialer: nodeDialer(), ...opts };
    if (opts.outboxPath && !opts.outbox) o.outbox = new FileOutbox(opts.outboxPath);
    super(o);
  }

  /** open builds the client and reads its outbox (the commands found become recovered). */
  static override async open(opts: NodeClientOptions): Promise<Client> {
    const c = new Client(opts);
    await c.loadOutbox();
    return c;
  }
}
