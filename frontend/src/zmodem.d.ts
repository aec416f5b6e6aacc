// The part of zmodem.js (CommonJS, no types of its own) that transfer.ts uses.
declare module 'zmodem.js/src/zmodem' {
  type Octets = number[];
  type Frameend = 'no_end_no_ack' | 'no_end_ack' | 'end_no_ack' | 'end_ack';

  interface Header {
    NAME: string;
    get_offset(): number;
  }

  interface FileDetails {
    name: string;
    size?: number;
    mtime?: number;
    files_remaining?: number;
    bytes_remaining?: number;
  }

  interface Transfer {
    end(bytes?: Uint8Array): Promise<void>;
  }

  interface Offer {
    get_details(): { name: string; size?: number };
    on(evt: 'input', fn: (payload: Octets) => void): Offer;
    accept(opts?: { on_input?: 'spool_uint8array' | ((payload: Octets) => void) }): Promise<Uint8Array[]>;
    skip(): void;
  }

  interface Session {
    type: 'send' | 'receive';
    on(evt: 'session_end' | 'garbage', fn: () => void): Session;
    on(evt: 'offer', fn: (offer: Offer) => void): Session;
    abort(): void;
    aborted(): boolean;
    has_ended(): boolean;
  }

  interface ReceiveSession extends Session {
    type: 'receive';
    start(): void;
    // Internals (zsession.js): the sender's ZFIN came (only its "OO" is still due).
    _got_ZFIN?: boolean;
    _on_session_end(): void;
  }

  interface SendSession extends Session {
    type: 'send';
    send_offer(details: FileDetails): Promise<Transfer | undefined>;
    close(): Promise<void>;
    // Internals (zsession.js) used for ZCRCQ pacing, which the library's Transfer.send lacks:
    // the next header's handlers (reset after every header), and one data block sent with
    // the given end of its last subpacket.
    _next_header_handler: Record<string, (hdr: Header) => void> | null;
    _send_file_part(bytes: Uint8Array, frameend: Frameend): void;
    _on_session_end(): void;
    // To send the end of a file again from the offset of rz's ZRPOS: the offset of the next
    // byte sent, whether ZDATA went (a new one carries the offset), a header.
    _file_offset: number;
    _sent_ZDATA?: boolean;
    _send_header(name: string, ...args: unknown[]): void;
    // Input not parsed yet, and the parse of one header from it (a send session parses one
    // header per consume, so a second header in the same read waits for the next read).
    _input_buffer: number[];
    _consume_first(): void;
  }

  interface Detection {
    confirm(): ReceiveSession | SendSession;
    deny(): void;
    get_session_role(): 'send' | 'receive';
  }

  class Sentry {
    constructor(opts: {
      to_terminal: (octets: Octets) => void;
      sender: (octets: Octets) => void;
      on_detect: (d: Detection) => void;
      on_retract: () => void;
    });
    consume(input: Octets | ArrayBuffer): void;
    get_confirmed_session(): Session | null;
    // Internals (zsentry.js) that zgate.ts reads to let output skip the sentry: the start of
    // output it found no whole header in, the session it is in, and a detection not yet
    // confirmed or denied (kept after a denial until the next output).
    _cache: Octets;
    _zsession?: Session | null;
    _parsed_session?: Session | null;
  }

  class Error extends globalThis.Error {}
}
