// What this client accepts from a gateway (docs/protocol.md, "What a client may treat as a
// protocol violation"): each result and notification it uses is checked for its members' types
// and ranges before anything reads it. A check returns null when the value is fine, else what is
// wrong, and the client ends the connection with a `protocol` MuxError.

/** Offsets and gaps above this are refused: 2^53, the largest integer a number holds exactly. */
export const MAX_OFFSET = 2 ** 53;
/** The largest `flow.window` accepted (the gateway's `--window` takes at most 64 MiB). */
export const MAX_WINDOW = 64 * 1024 * 1024;
/** The default bound of one message (the Go client's; the gateway's `maxWireMessageBytes`). */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** The largest terminal dimension (a PTY's size is a u16). */
const MAX_TERM = 65535;

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** An integer in lo … hi. */
function isInt(v: unknown, lo: number, hi: number): boolean {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= lo && v <= hi;
}

class Check {
  constructor(private readonly where: string) {}
  problem: string | null = null;

  private fail(msg: string): void {
    if (this.problem === null) this.problem = `${this.where}: ${msg}`;
  }
  /** o[key] is an integer in lo … hi; absent is allowed when optional. */
  int(o: Obj, key: string, lo: number, hi: number, optional = false): void {
    const v = o[key];
    if (v === undefined && optional) return;
    if (!isInt(v, lo, hi)) this.fail(`${key} ${JSON.stringify(v)} is not an integer in ${lo} … ${hi}`);
  }
  offset(o: Obj, key: string, optional = false): void {
    this.int(o, key, 0, MAX_OFFSET, optional);
  }
  str(o: Obj, key: string, optional = false): void {
    const v = o[key];
    if (v === undefined && optional) return;
    if (typeof v !== 'string') this.fail(`${key} ${JSON.stringify(v)} is not a string`);
  }
  /** o[key] is null/absent or {code: integer, signal: string | null}. */
  exit(o: Obj, key: string): void {
    const v = o[key];
    if (v === undefined || v === null) return;
    if (!isObj(v) || !isInt(v['code'], -(2 ** 31), 2 ** 31 - 1) || !(v['signal'] === null || v['signal'] === undefined || typeof v['signal'] === 'string')) {
      this.fail(`${key} ${JSON.stringify(v)} is not null or {code, signal}`);
    }
  }
  strings(o: Obj, key: string): void {
    const v = o[key];
    if (v === undefined || v === null) return;
    if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) this.fail(`${key} is not an array of strings`);
  }
  that(ok: boolean, msg: string): void {
    if (!ok) this.fail(msg);
  }
}

/** Checks a result of `method`; methods this client does not know are not checked. */
export function checkResult(method: string, r: unknown): string | null {
  const known = ['initialize', 'session.open', 'session.attach', 'session.detach', 'session.resize', 'session.signal',
    'session.kill', 'session.list', 'session.lease', 'recording.read'];
  if (!known.includes(method)) return null;
  const c = new Check(`${method} result`);
  if (!isObj(r)) return `${method} result ${JSON.stringify(r)?.slice(0, 40)} is not an object`;
  switch (method) {
    case 'initialize': {
      const limits = r['limits'] ?? {};
      const flow = r['flow'] ?? {};
      c.that(isObj(limits) && isObj(flow), 'limits and flow must be objects');
      if (!isObj(limits) || !isObj(flow)) break;
      c.int(flow, 'window', 0, MAX_WINDOW, true);
      c.int(flow, 'ackBytes', 0, MAX_WINDOW, true);
      c.int(flow, 'resumeHoldMs', 0, 2 ** 31, true);
      for (const k of ['maxMessageBytes', 'maxInputBytes', 'maxChannels', 'maxSessions', 'maxCols', 'maxRows',
        'maxOutputFrameBytes', 'pendingRequests', 'maxUnreadResponses', 'inputQueueBytes', 'maxWireMessageBytes',
        'maxSockets', 'inputBurst', 'openBurst', 'inputRate']) {
        c.int(limits, k, 0, MAX_OFFSET, true);
      }
      c.int(limits, 'maxOutputFrameBytes', 1, MAX_WINDOW, true);
      const rate = limits['openRate'];
      c.that(rate === undefined || (typeof rate === 'number' && rate >= 0 && Number.isFinite(rate)), 'limits.openRate is not a number');
      break;
    }
    case 'session.open':
      c.str(r, 'session');
      c.offset(r, 'offset');
      c.offset(r, 'live', true);
      c.int(r, 'pid', 0, 2 ** 31, true);
      break;
    case 'session.attach':
      c.str(r, 'session');
      c.offset(r, 'offset');
      c.offset(r, 'end');
      c.offset(r, 'live', true);
      c.offset(r, 'lost', true);
      c.int(r, 'pid', 0, 2 ** 31, true);
      c.int(r, 'cols', 0, MAX_TERM, true);
      c.int(r, 'rows', 0, MAX_TERM, true);
      c.exit(r, 'exit');
      c.int(r, 'screen', 0, MAX_OFFSET, true);
      c.int(r, 'screenCols', 0, MAX_TERM, true);
      c.int(r, 'screenRows', 0, MAX_TERM, true);
      c.offset(r, 'screenLost', true);
      if (c.problem === null) {
        const end = r['end'] as number;
        c.that((r['offset'] as number) <= end && ((r['live'] as number | undefined) ?? 0) <= end,
          `offset ${r['offset']} and live ${r['live']} must not pass end ${end}`);
      }
      break;
    case 'recording.read':
      c.str(r, 'data');
      c.offset(r, 'offset');
      c.offset(r, 'size');
      c.that(typeof r['eof'] === 'boolean', 'eof is not a boolean');
      break;
    case 'session.resize':
      c.int(r, 'cols', 1, MAX_TERM);
      c.int(r, 'rows', 1, MAX_TERM);
      break;
    case 'session.kill':
      c.str(r, 'session', true);
      c.str(r, 'status', true);
      c.exit(r, 'exit');
      c.strings(r, 'signals');
      c.offset(r, 'offset', true);
      for (const k of ['groups', 'escapees', 'survivors', 'unverified']) c.int(r, k, 0, 2 ** 31, true);
      break;
    case 'session.list': {
      const list = r['sessions'];
      if (list === undefined || list === null) break;
      if (!Array.isArray(list)) return 'session.list result: sessions is not an array';
      list.forEach((s: unknown, i) => {
        const e = new Check(`session.list sessions[${i}]`);
        if (!isObj(s)) {
          e.that(false, 'is not an object');
        } else {
          e.str(s, 'session');
          e.str(s, 'name', true);
          e.str(s, 'created', true);
          e.str(s, 'node', true);
          e.strings(s, 'cmd');
          e.int(s, 'pid', 0, 2 ** 31, true);
          for (const k of ['cols', 'rows']) e.int(s, k, 0, MAX_TERM, true);
          e.int(s, 'viewers', 0, 2 ** 31, true);
          e.offset(s, 'end', true);
          e.exit(s, 'exit');
        }
        if (c.problem === null && e.problem !== null) c.that(false, e.problem);
      });
      if (c.problem !== null) return c.problem.replace(/^session\.list result: /, '');
      break;
    }
    case 'session.lease':
      c.str(r, 'session', true);
      c.str(r, 'until', true);
      break;
  }
  return c.problem;
}

/** Checks the params of a known notification (channel-less problems included). */
export function checkNotification(method: string, p: unknown): string | null {
  if (!['session.gap', 'session.exit', 'session.closed', 'session.size'].includes(method)) return null;
  if (!isObj(p)) return `${method}: params are not an object`;
  const c = new Check(method);
  c.int(p, 'channel', 0, 0xffffffff);
  switch (method) {
    case 'session.gap':
      c.int(p, 'lost', 1, MAX_OFFSET);
      break;
    case 'session.exit':
      c.int(p, 'code', -(2 ** 31), 2 ** 31 - 1);
      c.that(p['signal'] === undefined || p['signal'] === null || typeof p['signal'] === 'string', 'signal is not a string or null');
      break;
    case 'session.closed':
      c.str(p, 'reason');
      break;
    case 'session.size':
      c.int(p, 'cols', 1, MAX_TERM);
      c.int(p, 'rows', 1, MAX_TERM);
      break;
  }
  return c.problem;
}
