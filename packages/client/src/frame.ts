// Wire constants and the binary frame codec (docs/protocol.md §2): `[type u8][channel u32 BE][payload]`.

export const SUBPROTOCOL = 'muxterm.v1';

export const FrameType = {
  Output: 1,
  Input: 2,
  Ack: 3,
  /** Protocol 1.4: a pipe session's stderr (server → client), to a client that declared `capabilities.pipes`. */
  Stderr: 4,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export const HEADER_BYTES = 5;
export const MAX_CHANNEL = 0xffffffff;

export interface Frame {
  type: number;
  channel: number;
  /** A view into the received buffer (not a copy). */
  payload: Uint8Array<ArrayBuffer>;
}

/** Encodes `[type u8][channel u32 BE][payload]`. */
export function encodeFrame(type: number, channel: number, payload?: Uint8Array): Uint8Array<ArrayBuffer> {
  checkChannel(channel);
  const len = payload ? payload.length : 0;
  const out = new Uint8Array(HEADER_BYTES + len);
  out[0] = type & 0xff;
  new DataView(out.buffer).setUint32(1, channel, false);
  if (payload) out.set(payload, HEADER_BYTES);
  return out;
}

/** An ack frame: type 3, payload exactly 4 bytes, u32 BE count of consumed output bytes. */
export function encodeAck(channel: number, count: number): Uint8Array<ArrayBuffer> {
  if (!Number.isInteger(count) || count < 0 || count > 0xffffffff) {
    throw new RangeError(`ack count out of range: ${count}`);
  }
  const out = encodeFrame(FrameType.Ack, channel, new Uint8Array(4));
  new DataView(out.buffer).setUint32(HEADER_BYTES, count, false);
  return out;
}

/** Decodes a binary message; returns null for a message shorter than the 5-byte header. */
export function decodeFrame(data: ArrayBuffer | ArrayBufferView): Frame | null {
  const bytes =
    data instanceof ArrayBuffer
      ? new Uint8Array(data)
      : new Uint8Array(data.buffer as ArrayBuffer, data.byteOffset, data.byteLength);
  if (bytes.length < HEADER_BYTES) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return {
    type: bytes[0]!,
    channel: view.getUint32(1, false),
    payload: bytes.subarray(HEADER_BYTES),
  };
}

/**
 * Payload bytes per input frame. §2 limits the input payload to `maxInputBytes` per frame but
 * also refuses "an input frame larger than maxInputBytes"; keeping the whole frame (5-byte
 * header + payload) within the limit satisfies both readings.
 */
export function inputChunkBytes(maxInputBytes: number): number {
  return Math.max(1, Math.floor(maxInputBytes) - HEADER_BYTES);
}

function checkChannel(channel: number): void {
  if (!Number.isInteger(channel) || channel < 1 || channel > MAX_CHANNEL) {
    throw new RangeError(`channel out of range: ${channel}`);
  }
}
