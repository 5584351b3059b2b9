// The outbox of a Node process: a JSON lines file (client/outbox.go's
// format). {"add":<frame>} when a command is posted, fsynced before the
// command is sent; {"done":"<client_msg_id>"} when it is answered, not
// fsynced (a lost done only makes the next client resend a command the
// gateway answers as a duplicate). A torn last line, from a crash
// mid-write, is ignored; a damaged earlier line is an error from load.
// The file is compacted when loaded and when done records outnumber live
// ones. One file belongs to one client (one user and device) at a time.

import { open, readFile, rename, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { ClosedError } from './errors.js';
import type { Outbox } from './outbox.js';
import type { ClientFrame } from './wire.js';

interface OutboxRecord {
  add?: ClientFrame;
  done?: string;
}

export class FileOutbox implements Outbox {
  private f: FileHandle | undefined;
  private live = new Map<string, ClientFrame>(); // insertion order = posting order
  private dones = 0;
  /** Operations run one after the other, in call order. */
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(readonly path: string) {}

  private serial<T>(op: () => Promise<T>): Promise<T> {
    const r = this.chain.then(op);
    this.chain = r.catch(() => {});
    return r;
  }

  load(): Promise<ClientFrame[]> {
    return this.serial(async () => {
      let text = '';
      try {
        text = await readFile(this.path, 'utf8');
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`read outbox: ${(e as Error).message}`);
      }
      const lines = text.split('\n');
      for (let i = 0; i < lines.length; i++) {
        const line = lines[i]!;
        if (line.trim() === '') continue;
        let r: OutboxRecord;
        try {
          r = JSON.parse(line) as OutboxRecord;
        } catch (e) {
          if (i === lines.length - 1) break; // torn last line: the crash came before its newline
          throw new Error(`outbox ${this.path} line ${i + 1}: ${(e as Error).message}`);
        }
        this.apply(r);
      }
      await this.compact();
      return [...this.live.values()];
    });
  }

  private apply(r: OutboxRecord): void {
    if (r.add && r.add.client_msg_id) {
      this.live.set(r.add.client_msg_id, r.add);
    } else if (r.done && this.live.delete(r.done)) {
      this.dones++;
    }
  }

  /** compact rewrites the file with the live commands only (temporary file, fsync, rename, fsync the directory) and reopens it for appending. */
  private async compact(): Promise<void> {
    await this.f?.close();
    this.f = undefined;
    const text = [...this.live.values()].map((f) => JSON.stringify({ add: f }) + '\n').join('');
    const tmp = this.path + '.tmp';
    const t = await open(tmp, 'w', 0o600);
    try {
      await t.writeFile(text);
      await t.sync();
    } finally {
      await t.close();
    }
    await rename(tmp, this.path);
    try {
      const d = await open(dirname(this.path), 'r');
      await d.sync().catch(() => {});
      await d.close();
    } catch {
      // a directory that cannot be opened for fsync (some platforms)
    }
    this.f = await open(this.path, 'a', 0o600);
    this.dones = 0;
  }

  private async append(r: OutboxRecord, durable: boolean): Promise<void> {
    if (!this.f || this.closed) throw new ClosedError();
    await this.f.write(JSON.stringify(r) + '\n');
    if (durable) await this.f.sync();
  }

  add(frame: ClientFrame): Promise<void> {
    return this.serial(async () => {
      if (!this.f) await this.compact(); // add before load: start the file
      await this.append({ add: frame }, true);
      this.apply({ add: frame });
    });
  }

  done(clientMsgId: string): Promise<void> {
    return this.serial(async () => {
      if (!this.live.has(clientMsgId)) return;
      await this.append({ done: clientMsgId }, false);
      this.apply({ done: clientMsgId });
      if (this.dones > 1024 && this.dones > 2 * this.live.size) await this.compact();
    });
  }

  close(): Promise<void> {
    return this.serial(async () => {
      this.closed = true;
      await this.f?.close();
      this.f = undefined;
    });
  }
}
