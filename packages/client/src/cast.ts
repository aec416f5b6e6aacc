// Recordings (docs/protocol.md §4, recording.list and recording.read): a recorded session's
// asciicast v2 file (https://docs.asciinema.org/manual/asciicast/v2) and a strict parser of it,
// for players and exports. No DOM.

/** recording.read's largest length. */
export const MAX_RECORDING_READ = 64 << 10;

/** A line longer than this is refused, not buffered. */
export const MAX_CAST_LINE = 4 << 20;

/** The header line of an asciicast v2 file. */
export interface CastHeader {
  version: 2;
  width: number;
  height: number;
  timestamp?: number;
  command?: string;
  title?: string;
  env?: Record<string, string>;
  /** The session recorded and its owner (muxterm's own key; players ignore it). */
  muxterm?: { session: string; owner: string };
}

/** One event: `at` seconds from the start; `code` "o" output, "i" input, "r" size, "m" marker. */
export interface CastEvent {
  at: number;
  code: string;
  data: string;
}

export interface Cast {
  header: CastHeader;
  events: CastEvent[];
}

/** What is wrong with a recording, and on which line (1: the header). */
export class CastError extends Error {
  readonly line: number;
  constructor(line: number, message: string) {
    super(`recording, line ${line}: ${message}`);
    this.name = 'CastError';
    this.line = line;
  }
}

/**
 * Reads a recording strictly: a version-2 header with a size, then events `[time, code, data]`
 * whose times never go back; blank lines are skipped. Throws CastError naming the first line
 * that breaks it (a truncated last line included).
 */
export function parseCast(file: Uint8Array | string): Cast {
  const text = typeof file === 'string' ? file : new TextDecoder('utf-8', { fatal: false }).decode(file);
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  if (lines.length === 0) throw new CastError(1, 'empty: no asciicast header');
  const header = parseHeader(lines[0]!);
  const events: CastEvent[] = [];
  let last = 0;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!.trim();
    const n = i + 1;
    if (line === '') continue;
    if (line.length > MAX_CAST_LINE) throw new CastError(n, `longer than ${MAX_CAST_LINE} characters`);
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      throw new CastError(n, 'not an event [time, code, data] (not JSON: truncated?)');
    }
    if (!Array.isArray(v) || v.length !== 3) throw new CastError(n, 'not an event [time, code, data]');
    const [at, code, data] = v as [unknown, unknown, unknown];
    if (typeof at !== 'number' || !Number.isFinite(at) || at < 0) throw new CastError(n, `time ${JSON.stringify(at)} is not a number of seconds`);
    if (at < last) throw new CastError(n, `time ${at} goes back from ${last}`);
    if (typeof code !== 'string' || code === '') throw new CastError(n, 'code is not a string');
    if (typeof data !== 'string') throw new CastError(n, 'data is not a string');
    last = at;
    events.push({ at, code, data });
  }
  return { header, events };
}

function parseHeader(line: string): CastHeader {
  if (line.length > MAX_CAST_LINE) throw new CastError(1, `longer than ${MAX_CAST_LINE} characters`);
  let h: unknown;
  try {
    h = JSON.parse(line);
  } catch {
    throw new CastError(1, 'not an asciicast v2 header (not JSON)');
  }
  if (typeof h !== 'object' || h === null || Array.isArray(h)) throw new CastError(1, 'not an asciicast v2 header');
  const o = h as Record<string, unknown>;
  if (o['version'] !== 2) throw new CastError(1, `version ${JSON.stringify(o['version'])}, want 2`);
  const w = o['width'];
  const ht = o['height'];
  if (!Number.isInteger(w) || !Number.isInteger(ht) || (w as number) < 1 || (ht as number) < 1 || (w as number) > 65535 || (ht as number) > 65535) {
    throw new CastError(1, `size ${JSON.stringify(w)}x${JSON.stringify(ht)} out of range`);
  }
  return o as unknown as CastHeader;
}
