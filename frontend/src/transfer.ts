// File transfer with ZMODEM (zmodem.js, against lrzsz's sz and rz): `sz FILE` in a session
// downloads the file in the browser; a file dropped on the terminal, or chosen with the Upload
// button, goes to the rz waiting for it. Only a page that may write transfers (a read-only page
// never answers sz or rz), and only live output starts one (replayed output never does).
import * as Zmodem from 'zmodem.js/src/zmodem';
import type { Channel, MuxError } from '@muxterm/client';
import { showError, writable, type App } from './app';
import type { Tab } from './tab';
import { bypassSentry } from './zgate';

/** File bytes per ZCRCQ subpacket of an upload (rz acknowledges each with a ZACK). */
const BLOCK = 8 * 1024;
/**
 * Blocks sent and not yet acknowledged by rz, and one more at the end of a file: with ZDLE's
 * escapes (2× at worst, ~1.26× for random bytes) at most 48 KiB that rz has not read, under the
 * gateway's 64 KiB input queue.
 */
const BLOCKS_IN_FLIGHT = 2;
/** How long an upload waits for rz's acknowledgement of a block before it gives up. */
const ACK_TIMEOUT_MS = 15_000;
/** Bytes of a file read from disk at once. */
const READ_BYTES = 1024 * 1024;
/** The part of the gateway's input rate an upload uses (keys typed by other viewers need the rest). */
const RATE_SHARE = 0.9;

/** ZMODEM's cancel: CANs, then backspaces over them for a shell that sees them. */
const ABORT = Uint8Array.from([24, 24, 24, 24, 24, 24, 24, 24, 8, 8, 8, 8, 8, 8, 8, 8]);

type Phase = 'idle' | 'waiting' | 'sending' | 'receiving';

/** The ZMODEM side of one tab's channel: a Sentry that watches live output for sz and rz. */
export class TabTransfer {
  private readonly sentry: Zmodem.Sentry;
  private session: Zmodem.ReceiveSession | Zmodem.SendSession | null = null;
  private phase: Phase = 'idle';
  /** Output the sentry passes to the terminal during one consume. */
  private shown: number[][] = [];
  private detected = false;
  /** Output held back: a trailing "rz\r" that may be sz's, and its timer. */
  private held: number[] = [];
  private heldTimer: ReturnType<typeof setTimeout> | undefined;
  /** Why the transfer ends, once it must (a refusal, a cancel): checked between blocks. */
  private failure: string | null = null;
  /** Wire bytes written since the upload started, for the rate pacing. */
  private sentBytes = 0;
  /** Wakes an upload waiting for rz's acknowledgements once the transfer failed. */
  private stop: (() => void) | null = null;
  private ackTimer: ReturnType<typeof setTimeout> | undefined;
  /** Until when a refused input is taken for the abort's (sent again once). */
  private abortUntil = 0;
  private readonly bar: HTMLElement;
  private readonly text: HTMLElement;
  private readonly input: HTMLInputElement;

  constructor(
    private readonly app: App,
    private readonly tab: Tab,
    private readonly ch: Channel,
  ) {
    this.bar = tab.pane.querySelector('.transfer') as HTMLElement;
    this.text = this.bar.querySelector('.what') as HTMLElement;
    this.input = this.bar.querySelector('input[type=file]') as HTMLInputElement;
    this.sentry = new Zmodem.Sentry({
      to_terminal: (octets) => {
        this.shown.push(octets);
      },
      sender: (octets) => {
        this.sentBytes += octets.length;
        this.ch.write(Uint8Array.from(octets));
      },
      on_detect: (d) => this.detect(d),
      on_retract: () => undefined,
    });
  }

  /** Whether a transfer holds the channel: keys are not typed into it (Ctrl-C cancels). */
  get busy(): boolean {
    return this.phase !== 'idle';
  }

  /**
   * Live output: returns what the terminal shows (ZMODEM's frames taken out). Throws nothing:
   * a protocol failure ends the transfer with a notice.
   */
  consume(bytes: Uint8Array): Uint8Array {
    // Output that cannot start a transfer skips the sentry (zgate.ts). A trailing "rz\r"
    // still takes the slow path, which holds it for the header that may follow.
    if (this.phase === 'idle' && this.session === null && this.held.length === 0 && !endsWithRz(bytes) && bypassSentry(this.sentry, bytes)) {
      return bytes.slice();
    }
    this.shown = [];
    this.detected = false;
    const s = this.session;
    // lrzsz flushes its terminal's output as it exits (tcflush TCIOFLUSH): sz's "OO" after the
    // ZFIN exchange (and rz's ZFIN answer) may never come. The file is complete by then: once
    // output that is not ZMODEM's follows, the session is over and that output is the shell's.
    if (s && s.type === 'receive' && s._got_ZFIN && bytes[0] !== 0x4f) {
      s._on_session_end();
      return bytes.slice();
    }
    try {
      this.sentry.consume(Array.from(bytes));
      // zmodem.js's send session parses one header per read: rz's ZACK and ZRINIT in one read
      // would leave the ZRINIT waiting for rz's next output, which comes after its 10 s timeout.
      const cur = this.session;
      if (cur && cur.type === 'send' && !cur.has_ended()) {
        for (let n = cur._input_buffer.length; n > 0 && this.session === cur; n = cur._input_buffer.length) {
          cur._consume_first();
          if (cur._input_buffer.length >= n) break;
        }
      }
    } catch (e) {
      this.fail(`transfer failed: ${errorText(e)}`);
    }
    let out = this.shown.flat();
    // sz writes "rz\r" and then its ZRQINIT, often in two reads: "rz\r" at the end of output
    // waits up to 200 ms for what follows, so the header takes it away with it.
    if (this.held.length > 0) {
      clearTimeout(this.heldTimer);
      out = this.held.concat(out);
      this.held = [];
    }
    if (this.detected) out = withoutHeader(out);
    else out = withoutHexHeaders(out); // what a cancelled sz or rz still says (ZACK, ZRPOS, …)
    const n = out.length;
    if (this.phase === 'idle' && n >= 3 && out[n - 3] === 0x72 && out[n - 2] === 0x7a && out[n - 1] === 0x0d) {
      this.held = out.slice(n - 3);
      out = out.slice(0, n - 3);
      this.heldTimer = setTimeout(() => {
        const held = Uint8Array.from(this.held);
        this.held = [];
        if (held.length > 0) this.tab.guard.output(held, false, () => undefined);
      }, 200);
    }
    return Uint8Array.from(out);
  }

  /** Keys typed while a transfer runs: Ctrl-C (or Ctrl-X) cancels it, the rest is dropped. */
  key(data: string): void {
    if (data.includes('\x03') || data.includes('\x18')) this.cancel('cancelled');
  }

  /** The gateway refused input of this channel (inputQueue, inputRate, …): an upload cannot go on. */
  refused(e: MuxError): void {
    if (this.phase === 'idle') {
      // The abort itself may have been refused (over the input rate): say it again once the
      // rate allows, or sz/rz waits out its own timeouts.
      if (this.abortUntil > performance.now()) setTimeout(() => this.ch.write(ABORT), 1100);
      return;
    }
    this.fail(`upload refused by the gateway (${String(e.data['limit'] ?? e.kind)}); transfer aborted`);
  }

  /** The channel was bound again after a reconnect: the stream in between is not ours to parse. */
  interrupted(): void {
    if (this.phase !== 'idle') this.fail('the connection dropped; transfer aborted');
  }

  cancel(why: string): void {
    if (this.phase !== 'idle') this.fail(why);
  }

  /** Files dropped on the terminal or chosen with Upload: sent to the waiting rz. */
  upload(files: File[]): void {
    if (files.length === 0) return;
    const s = this.session;
    if (this.phase !== 'waiting' || !s || s.type !== 'send') {
      showError(this.app, new Error('No rz is waiting: run rz in the terminal, then drop or upload the file.'));
      return;
    }
    this.phase = 'sending';
    this.input.disabled = true;
    void this.sendAll(s, files);
  }

  private detect(d: Zmodem.Detection): void {
    if (!writable(this.app) || this.phase !== 'idle') {
      if (writable(this.app)) d.deny();
      return;
    }
    this.detected = true;
    const s = d.confirm();
    this.session = s;
    this.failure = null;
    s.on('session_end', () => this.ended());
    if (s.type === 'receive') {
      this.phase = 'receiving';
      this.show('sz: receiving…', false);
      s.on('offer', (offer) => this.receive(offer));
      s.start();
    } else {
      this.phase = 'waiting';
      this.show('rz is waiting: drop a file on the terminal, or', true);
    }
  }

  private receive(offer: Zmodem.Offer): void {
    const { name, size } = offer.get_details();
    let got = 0;
    const started = performance.now();
    offer.on('input', (p) => {
      got += p.length;
      this.progress(`${name}: ${got}${size !== undefined ? ` of ${size}` : ''} bytes`);
    });
    offer
      .accept()
      .then((parts) => {
        const blob = new Blob(parts as BlobPart[], { type: 'application/octet-stream' });
        saveBlob(blob, name);
        this.done('download', name, blob.size, started);
      })
      .catch((e: unknown) => this.fail(`download of ${name} failed: ${errorText(e)}`));
  }

  private async sendAll(s: Zmodem.SendSession, files: File[]): Promise<void> {
    try {
      let left = files.reduce((n, f) => n + f.size, 0);
      for (let i = 0; i < files.length; i++) {
        const f = files[i]!;
        const started = performance.now();
        const xfer = await s.send_offer({
          name: f.name,
          size: f.size,
          mtime: Math.floor(f.lastModified / 1000),
          files_remaining: files.length - i,
          bytes_remaining: left,
        });
        left -= f.size;
        this.check();
        if (!xfer) {
          this.tab.term.write(notice(`rz skipped ${f.name} (it exists there?)`));
          continue;
        }
        await this.sendFile(s, xfer, f);
        this.done('upload', f.name, f.size, started);
      }
      this.check();
      // rz's ZFIN may be flushed away as rz exits (see consume): the shell's prompt, or 3 s,
      // ends the session as well.
      const over = new Promise<void>((ok) => {
        s.on('garbage', ok);
        setTimeout(ok, 3000);
      });
      const closed = s.close();
      const fin = s._next_header_handler ?? {};
      const again: Record<string, (hdr: Zmodem.Header) => void> = {
        ...fin,
        // rz missed our ZFIN and says ZRINIT again: ZFIN again.
        ZRINIT: () => {
          s._next_header_handler = again;
          s._send_header('ZFIN');
        },
      };
      s._next_header_handler = again;
      await Promise.race([closed, over]);
      if (!s.has_ended()) s._on_session_end();
    } catch (e) {
      this.fail(this.failure ?? `upload failed: ${errorText(e)}`);
    }
  }

  /**
   * Sends one file in ZCRCQ blocks, at most BLOCKS_IN_FLIGHT of them unacknowledged, paced
   * under the gateway's input rate: nothing the gateway would refuse is sent.
   */
  private async sendFile(s: Zmodem.SendSession, xfer: Zmodem.Transfer, f: File): Promise<void> {
    let unacked = 0;
    let broken: Error | null = null;
    let waiter: { n: number; ok: () => void; bad: (e: Error) => void } | null = null;
    const wake = (): void => {
      if (!waiter) return;
      const w = waiter;
      if (broken) w.bad(broken);
      else if (unacked <= w.n) w.ok();
      else return;
      waiter = null;
    };
    // The handlers of rz's next header: a ZACK answers the oldest ZCRCQ; a ZRPOS means rz lost
    // data (it cannot be sent again from here: the transfer fails, the file is not half-written
    // silently).
    const expect = (): void => {
      s._next_header_handler = {
        ZACK: () => {
          unacked--;
          expect();
          wake();
        },
        ZRPOS: (hdr) => {
          broken = new Error(`rz asked to resend from byte ${hdr.get_offset()}`);
          wake();
        },
      };
    };
    // rz answers a ZCRCQ at once; one that does not within ACK_TIMEOUT_MS has stopped.
    const until = (n: number): Promise<void> =>
      new Promise<void>((ok, bad) => {
        waiter = { n, ok, bad };
        wake();
      }).finally(() => clearTimeout(this.ackTimer));
    const armed = (p: Promise<void>): Promise<void> => {
      clearTimeout(this.ackTimer);
      this.ackTimer = setTimeout(() => {
        broken = new Error(`rz acknowledged nothing for ${ACK_TIMEOUT_MS / 1000} s`);
        wake();
      }, ACK_TIMEOUT_MS);
      return p;
    };
    expect();
    this.stop = () => {
      broken = new Error(this.failure ?? 'stopped');
      wake();
    };
    const rate = this.app.client.limits.inputRate;
    const t0 = performance.now();
    this.sentBytes = 0;
    let sent = 0;
    let last: Uint8Array = new Uint8Array(0);
    for (let at = 0; at < f.size; at += READ_BYTES) {
      const chunk = new Uint8Array(await f.slice(at, Math.min(f.size, at + READ_BYTES)).arrayBuffer());
      for (let o = 0; o < chunk.length; o += BLOCK) {
        const block = chunk.subarray(o, Math.min(chunk.length, o + BLOCK));
        if (at + o + block.length >= f.size) {
          last = block; // the last block ends the file (ZCRCE, then ZEOF)
          break;
        }
        this.check();
        if (rate) await pace(t0, this.sentBytes, rate * RATE_SHARE);
        this.check();
        unacked++;
        s._send_file_part(block, 'no_end_ack');
        sent += block.length;
        this.progress(`${f.name}: ${sent} of ${f.size} bytes`);
        await armed(until(BLOCKS_IN_FLIGHT - 1));
      }
    }
    // The last block goes at once, behind the ones in flight. end() takes the header handlers
    // over for ZEOF's ZRINIT; the ZACKs still due are taken with it. Should rz ask for the end of
    // the file again (ZRPOS: it missed it), at most the blocks in flight go again from there (read
    // again from the file), up to 3 times.
    this.check();
    if (rate) await pace(t0, this.sentBytes, rate * RATE_SHARE);
    this.check();
    this.stop = null;
    const eof = xfer.end(last);
    const h = s._next_header_handler ?? {};
    let resends = 0;
    const tail: Record<string, (hdr: Zmodem.Header) => void> = {
      ...h,
      ZACK: () => {
        s._next_header_handler = tail;
      },
      ZRPOS: (hdr) => {
        const from = hdr.get_offset();
        if (resends++ >= 3 || from > f.size || f.size - from > (BLOCKS_IN_FLIGHT + 1) * BLOCK) {
          this.fail(`upload of ${f.name} failed: rz asked to resend from byte ${from}`);
          return;
        }
        s._next_header_handler = tail;
        void f
          .slice(from)
          .arrayBuffer()
          .then((b) => {
            if (this.failure !== null) return;
            s._file_offset = from;
            s._sent_ZDATA = false; // a new ZDATA carries the offset
            s._send_file_part(new Uint8Array(b), 'end_no_ack');
            s._send_header('ZEOF', s._file_offset);
          });
      },
    };
    s._next_header_handler = tail;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      eof,
      new Promise<void>((_, bad) => {
        timer = setTimeout(() => bad(new Error(`rz did not confirm the end of ${f.name} within ${ACK_TIMEOUT_MS / 1000} s`)), ACK_TIMEOUT_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    s._file_offset = 0; // as end() leaves it, for the next file (a resend moved it)
    this.check();
    this.progress(`${f.name}: ${f.size} of ${f.size} bytes`);
  }

  /** Throws the reason the transfer must stop, if there is one. */
  private check(): void {
    if (this.failure !== null) throw new Error(this.failure);
  }

  private fail(why: string): void {
    if (this.failure === null) this.failure = why;
    this.stop?.();
    this.stop = null;
    if (this.phase !== 'idle') this.tab.term.write(notice(why));
    const s = this.session;
    if (s && !s.has_ended()) {
      try {
        s.abort(); // CAN×5: sz or rz gives up and gives the terminal back
        this.abortUntil = performance.now() + 5000;
      } catch {
        /* already aborted */
      }
    }
    this.ended();
  }

  private ended(): void {
    if (this.phase === 'idle') return;
    this.phase = 'idle';
    this.session = null;
    this.bar.hidden = true;
    this.input.value = '';
    this.input.disabled = false;
  }

  private done(direction: 'download' | 'upload', name: string, bytes: number, started: number): void {
    this.app.lastTransfer = { direction, name, bytes, ms: performance.now() - started };
    this.tab.term.write(notice(`${direction === 'download' ? 'downloaded' : 'uploaded'} ${name} (${bytes} bytes)`));
  }

  private show(what: string, upload: boolean): void {
    this.text.textContent = what;
    this.bar.classList.toggle('can-upload', upload);
    this.bar.hidden = false;
  }

  private progress(what: string): void {
    this.text.textContent = what;
  }
}

/** Waits until `bytes` written since t0 fit under `rate` bytes per second (a 64 KiB allowance). */
function pace(t0: number, bytes: number, rate: number): Promise<void> {
  const due = t0 + ((bytes - 64 * 1024) / rate) * 1000;
  const wait = due - performance.now();
  return wait > 0 ? new Promise((ok) => setTimeout(ok, wait)) : Promise.resolve();
}

/** The terminal's part of the chunk that started a transfer: up to sz's "rz\r" and the hex header. */
function withoutHeader(out: number[]): number[] {
  // ZPAD ZPAD ZDLE 'B': a hex header; sz sends "rz\r" before its ZRQINIT.
  for (let i = 0; i + 3 < out.length; i++) {
    if (out[i] === 0x2a && out[i + 1] === 0x2a && out[i + 2] === 0x18 && out[i + 3] === 0x42) {
      let end = i;
      if (end >= 3 && out[end - 3] === 0x72 && out[end - 2] === 0x7a && out[end - 1] === 0x0d) end -= 3;
      return out.slice(0, end);
    }
  }
  return out;
}

/** out without ZMODEM hex headers: ZPAD ZPAD ZDLE 'B', 14 hex digits, then CR, LF|0x80, XON. */
function withoutHexHeaders(out: number[]): number[] {
  let i = out.indexOf(0x18);
  if (i < 0) return out;
  const keep: number[] = [];
  let from = 0;
  for (; i >= 0 && i < out.length; i = out.indexOf(0x18, i + 1)) {
    if (i < 2 || out[i - 1] !== 0x2a || out[i - 2] !== 0x2a || out[i + 1] !== 0x42) continue;
    let end = i + 2;
    while (end < out.length && end < i + 16 && isHex(out[end]!)) end++;
    if (end !== i + 16) continue;
    for (const b of [0x0d, 0x8a, 0x11]) if (out[end] === b) end++;
    keep.push(...out.slice(from, i - 2));
    from = end;
    i = end - 1;
  }
  if (from === 0) return out;
  keep.push(...out.slice(from));
  return keep;
}

function isHex(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66);
}

function notice(text: string): string {
  return `\x1b[0m\r\n\x1b[2m[muxterm: ${text}]\x1b[0m\r\n`;
}

function errorText(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

/** Hands the browser a file to save, as a link with `download` would. */
function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name.split('/').pop() || 'download';
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** Drop on the pane and the bar's Upload and Cancel, for a page that may write. */
export function wireTransfer(app: App, tab: Tab): void {
  const bar = document.createElement('div');
  bar.className = 'transfer';
  bar.hidden = true;
  bar.innerHTML =
    '<span class="what"></span>' +
    '<label class="upload" title="Send a file to rz">Upload<input type="file" multiple></label>' +
    '<button type="button" class="cancel" title="Cancel the transfer (Ctrl-C)">Cancel</button>';
  tab.pane.append(bar);
  const input = bar.querySelector('input') as HTMLInputElement;
  input.addEventListener('change', () => {
    tab.transfer?.upload(Array.from(input.files ?? []));
  });
  bar.querySelector('.cancel')!.addEventListener('click', () => tab.transfer?.cancel('cancelled'));
  if (!writable(app)) return;
  tab.pane.addEventListener('dragover', (ev) => {
    if (ev.dataTransfer?.types.includes('Files')) ev.preventDefault();
  });
  tab.pane.addEventListener('drop', (ev) => {
    const files = Array.from(ev.dataTransfer?.files ?? []);
    if (files.length === 0) return;
    ev.preventDefault();
    if (tab.transfer) tab.transfer.upload(files);
  });
}

/** Whether output ends with "rz\r", what sz writes just before its first header. */
function endsWithRz(b: Uint8Array): boolean {
  const n = b.length;
  return n >= 3 && b[n - 3] === 0x72 && b[n - 2] === 0x7a && b[n - 1] === 0x0d;
}
