// The JSON frames of the gateway protocol (docs/protocol.md; the Go types
// are in internal/wire). Only what the SDK reads or sends is typed; unknown
// fields are kept as they come.

import type { ErrorBody } from './errors.js';

/** Settings of a group: in an edit only the fields present change. */
export interface GroupSettings {
  title?: string;
  description?: string;
  avatar_url?: string;
  /** invite_only, open or code */
  join_rule?: string;
  members_can_invite?: boolean;
  /** Only sent, never shown: events say has_invite_code. */
  invite_code?: string;
  has_invite_code?: boolean;
}

/** What a group governance event carries besides its action. */
export interface GroupEvent {
  user_id?: string;
  role?: string;
  muted_until_ms?: number;
  muted?: boolean;
  by_invite_code?: boolean;
  settings?: GroupSettings;
}

/**
 * One sequenced event of a session, pushed or synced (in its current state
 * when synced). msg_id is a decimal string: it does not fit JavaScript's
 * 2^53 integers; seqs are plain numbers.
 */
export interface Event {
  session_id: string;
  seq: number;
  msg_id: string;
  client_msg_id?: string;
  sender_user_id: string;
  sender_device_id?: string;
  server_ts: number;
  /** message, session_create, membership, edit, recall or group */
  kind: string;
  type?: string;
  body?: unknown;
  target_seq?: number;
  session_kind?: string;
  title?: string;
  action?: string;
  user_ids?: string[];
  group?: GroupEvent;
  edited?: boolean;
  recalled?: boolean;
}

/** A session in a changes result. */
export interface SessionChange {
  session_id: string;
  max_seq: number;
  read_seq: number;
  preview?: string;
  unread: number;
  member_version?: number;
  role?: string;
}

/** One member in a member_list result. */
export interface MemberInfo {
  user_id: string;
  role: string;
  joined_seq: number;
  [k: string]: unknown;
}

/** One user's change in a member_changes result. */
export interface MemberChange {
  user_id: string;
  [k: string]: unknown;
}

/** A delivered cursor: the device holds session up to seq. */
export interface Cursor {
  session_id: string;
  seq: number;
}

/** A frame the client sends. */
export interface ClientFrame {
  op: string;
  req_id?: string;
  client_msg_id?: string;
  session_id?: string;
  type?: string;
  body?: unknown;
  client_ts?: number;
  target_seq?: number;
  kind?: string;
  peer_user_id?: string;
  member_user_ids?: string[];
  title?: string;
  action?: string;
  user_ids?: string[];
  after_seq?: number;
  before_seq?: number;
  around_seq?: number;
  limit?: number;
  seq?: number;
  cursors?: Cursor[];
  active?: boolean;
  user_id?: string;
  role?: string;
  muted_until_ms?: number;
  muted?: boolean;
  invite_code?: string;
  settings?: GroupSettings;
  after_user_id?: string;
  since_version?: number;
  device_id?: string;
  read_receipts?: boolean;
}

/** Any frame of the gateway, decoded loosely: which fields are set depends on op. */
export interface ServerFrame {
  op: string;
  req_id?: string;
  client_msg_id?: string;
  session_id?: string;
  status?: string;
  seq?: number;
  msg_id?: string;
  server_ts?: number;
  duplicate?: boolean;
  error?: ErrorBody;
  event?: Event;
  messages?: Event[];
  has_more?: boolean;
  has_more_before?: boolean;
  sessions?: SessionChange[];
  unread?: number;
  total_unread?: number;
  read_seq?: number;
  conn_id?: string;
  user_id?: string;
  device_id?: string;
  gateway_id?: string;
  platform?: string;
  heartbeat_ms?: number;
  max_frame_bytes?: number;
  kind?: string;
  active?: boolean;
  expires_in_ms?: number;
  users?: string[];
  count?: number;
  /** seen_by: a count; member_list: a list. */
  members?: number | MemberInfo[];
  member_version?: number;
  changes?: MemberChange[];
  read_receipts?: boolean;
  [k: string]: unknown;
}

/** Why a frame is refused by decodeFrame. */
export class BadFrameError extends Error {
  override readonly name = 'BadFrameError';
}

/**
 * decodeFrame parses one gateway frame and checks what the client relies
 * on: an op, an event with a session and a positive seq, an error body on
 * error frames, ACK fields on ok ACKs, positive seqs in sync pages.
 */
export function decodeFrame(text: string): ServerFrame {
  let f: unknown;
  try {
    f = JSON.parse(text);
  } catch (e) {
    throw new BadFrameError(`bad server frame: ${(e as Error).message}`);
  }
  if (typeof f !== 'object' || f === null || Array.isArray(f)) throw new BadFrameError('bad server frame: not an object');
  const fr = f as ServerFrame;
  if (typeof fr.op !== 'string' || fr.op === '') throw new BadFrameError('bad server frame: no op');
  switch (fr.op) {
    case 'event':
      if (!fr.event || typeof fr.event.session_id !== 'string' || fr.event.session_id === '' || !(fr.event.seq > 0))
        throw new BadFrameError('bad server frame: event without session or seq');
      break;
    case 'error':
      if (!fr.error || typeof fr.error.code !== 'number') throw new BadFrameError('bad server frame: error frame without error');
      break;
    case 'ack':
    case 'seq_notice':
      if (!fr.client_msg_id) throw new BadFrameError(`bad server frame: ${fr.op} without client_msg_id`);
      if (fr.status === 'ok' && !((fr.seq ?? 0) > 0)) throw new BadFrameError(`bad server frame: ok ${fr.op} without seq`);
      break;
    case 'result':
      for (const m of fr.messages ?? []) {
        if (!(m.seq > 0)) throw new BadFrameError(`bad server frame: sync result with seq ${m.seq}`);
      }
      break;
  }
  return fr;
}
