// The recordings page (recordings.html): the recordings of the signed-in principal's sessions
// (recording.list) and a player on xterm.js: play and pause, speed 0.5–4×, seeking on a
// timeline, and jumps between markers (attach, detach, kill, exit, drops). A recording is read
// whole (recording.read) and parsed strictly (parseCast): a broken one is refused with the line
// that breaks it, before anything plays.
import { CastError, MuxClient, parseCast, type Cast, type RecordingInfo } from '@muxterm/client';
import { Terminal } from '@xterm/xterm';
import { themes, webSocketUrl } from './config';
import { lightenViewport } from './viewport';

/** A pause longer than this plays as this long (asciinema's idle_time_limit). */
const IDLE_LIMIT_MS = 5000;
/**
 * Larger recordings are for `muxterm play`: the page holds them whole, and a seek writes up to
 * all of their output at once, which must stay below xterm.js's 50 MB discard mark.
 */
const MAX_PLAYABLE_BYTES = 32 << 20;
/** A size from a recording is clamped to this, as a hostile one could ask for anything. */
const MAX_DIM = 1000;

function dim(n: number): number {
  return Math.max(1, Math.min(MAX_DIM, Math.floor(n)));
}

function el<T extends HTMLElement>(id: string): T {
  const e = document.getElementById(id);
  if (!e) throw new Error(`#${id} missing from recordings.html`);
  return e as T;
}

/** An event on the play clock: `t` milliseconds, pauses cut to IDLE_LIMIT_MS. */
interface Step {
  t: number;
  code: string;
  data: string;
}

export interface Marker {
  t: number;
  label: string;
}

/** Plays a parsed recording into a terminal. Everything runs on the page's one thread. */
export class Player {
  readonly term: Terminal;
  steps: Step[] = [];
  markers: Marker[] = [];
  duration = 0;
  private cols = 80;
  private rows = 24;
  /** steps[next] is the first step not yet shown; clock is the play time shown. */
  private next = 0;
  clock = 0;
  speed = 1;
  playing = false;
  private started = 0; // performance.now() at clock 0 of the current play, at speed
  private timer: ReturnType<typeof setTimeout> | undefined;
  onUpdate: () => void = () => {};

  constructor(host: HTMLElement) {
    this.term = new Terminal({ theme: themes.dark, scrollback: 1000, convertEol: false, disableStdin: true, cursorBlink: false });
    this.term.open(host);
    lightenViewport(this.term); // a seek writes the recording from its start
  }

  /** Recording seconds (a span's muxterm.recording.offset_s) → play time, pauses cut. */
  private atToT: { at: number; t: number }[] = [];

  load(cast: Cast): void {
    this.pause();
    this.cols = dim(cast.header.width);
    this.rows = dim(cast.header.height);
    this.steps = [];
    this.markers = [];
    this.atToT = [];
    let t = 0;
    let at = 0;
    for (const e of cast.events) {
      t += Math.min((e.at - at) * 1000, IDLE_LIMIT_MS);
      at = e.at;
      this.atToT.push({ at, t });
      if (e.code === 'o' || e.code === 'r') this.steps.push({ t, code: e.code, data: e.data });
      if (e.code === 'm') this.markers.push({ t, label: e.data });
    }
    this.duration = t;
    this.seek(0);
  }

  /**
   * Shows the recording as it was at play time t: from a fresh terminal, every step up to t.
   * xterm.js queues writes but resizes at once, so the reset and every size go through the
   * write queue (a write's callback), in order with the output around them: output still
   * queued from before the seek lands before the reset, never on top of its result.
   */
  seek(t: number): void {
    const wasPlaying = this.playing;
    this.pause();
    t = Math.max(0, Math.min(t, this.duration));
    const { cols, rows } = this;
    this.term.write('\x1bc', () => this.term.resize(cols, rows)); // RIS, in band
    this.next = 0;
    this.flushTo(t);
    this.clock = t;
    this.onUpdate();
    if (wasPlaying) this.play();
  }

  /** Writes the steps up to play time t: output runs batched into one write, sizes in order. */
  private flushTo(t: number): void {
    let out = '';
    while (this.next < this.steps.length && this.steps[this.next]!.t <= t) {
      const s = this.steps[this.next++]!;
      if (s.code === 'o') {
        out += s.data;
        continue;
      }
      const m = /^(\d+)x(\d+)$/.exec(s.data);
      if (m) {
        const c = dim(Number(m[1]));
        const r = dim(Number(m[2]));
        this.term.write(out, () => this.term.resize(c, r));
        out = '';
      }
    }
    if (out) this.term.write(out);
  }

  play(): void {
    if (this.playing) return;
    if (this.clock >= this.duration) this.seek(0);
    this.playing = true;
    this.started = performance.now() - this.clock / this.speed;
    this.tick();
  }

  pause(): void {
    this.playing = false;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  setSpeed(x: number): void {
    this.speed = x;
    if (this.playing) this.started = performance.now() - this.clock / this.speed;
  }

  private tick = (): void => {
    if (!this.playing) return;
    this.clock = Math.min(this.duration, (performance.now() - this.started) * this.speed);
    this.flushTo(this.clock);
    this.onUpdate();
    if (this.next >= this.steps.length && this.clock >= this.duration) {
      this.playing = false;
      this.onUpdate();
      return;
    }
    const due = this.next < this.steps.length ? this.steps[this.next]!.t : this.duration;
    // At most a frame apart while playing, so the timeline moves; no faster than a frame.
    this.timer = setTimeout(this.tick, Math.max(16, Math.min(250, (due - this.clock) / this.speed)));
  };

  /** The play time of the moment `seconds` into the recording (its own clock). */
  playTime(seconds: number): number {
    let prev = { at: 0, t: 0 };
    for (const p of this.atToT) {
      if (p.at > seconds) return Math.min(p.t, prev.t + Math.min((seconds - prev.at) * 1000, IDLE_LIMIT_MS));
      prev = p;
    }
    return this.duration;
  }

  /** The marker after (dir 1) or before (dir -1) the clock. */
  jump(dir: 1 | -1): void {
    const eps = 1;
    const m = dir > 0 ? this.markers.find((k) => k.t > this.clock + eps) : [...this.markers].reverse().find((k) => k.t < this.clock - eps);
    if (m) this.seek(m.t);
  }
}

/** m:ss.t */
function fmt(ms: number): string {
  const tenths = Math.floor(ms / 100);
  const s = Math.floor(tenths / 10);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}.${tenths % 10}`;
}

function showError(msg: string): void {
  const e = el('rerror');
  e.textContent = msg;
  e.hidden = false;
}

async function open(client: MuxClient, player: Player, r: RecordingInfo): Promise<void> {
  el('rerror').hidden = true;
  for (const tr of document.querySelectorAll('#rlist tr.current')) tr.classList.remove('current');
  document.querySelector(`#rlist tr[data-recording="${r.recording}"]`)?.classList.add('current');
  if (r.bytes > MAX_PLAYABLE_BYTES) {
    showError(`This recording is ${r.bytes} bytes, more than the page plays (${MAX_PLAYABLE_BYTES}): export it (muxterm recordings export) and play it with muxterm play.`);
    return;
  }
  const bytes = await client.exportRecording(r.recording);
  let cast: Cast;
  try {
    cast = parseCast(bytes);
  } catch (e) {
    player.pause();
    el('player').hidden = true;
    showError(e instanceof CastError ? `Cannot play this recording: ${e.message}` : String(e));
    return;
  }
  el('player').hidden = false;
  el('ptitle').textContent = `${r.name || r.command || r.recording} — ${new Date(r.started).toLocaleString()}`;
  const dl = el<HTMLAnchorElement>('pdownload');
  URL.revokeObjectURL(dl.href);
  dl.href = URL.createObjectURL(new Blob([bytes as Uint8Array<ArrayBuffer>], { type: 'application/x-asciicast' }));
  dl.download = `${r.recording}.cast`;
  player.load(cast);
  const list = el<HTMLOListElement>('pmarkers');
  list.replaceChildren(
    ...player.markers.map((m) => {
      const li = document.createElement('li');
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'marker';
      if (m.label.startsWith('muxterm: ')) b.classList.add('dropped');
      b.dataset['label'] = m.label;
      b.textContent = `${fmt(m.t)} ${m.label}`;
      b.addEventListener('click', () => player.seek(m.t));
      li.append(b);
      return li;
    }),
  );
  const u = new URL(location.href);
  u.searchParams.set('recording', r.recording);
  history.replaceState(null, '', u.pathname + u.search);
}

async function start(): Promise<void> {
  const client = new MuxClient(webSocketUrl(location), { client: { name: 'muxterm-recordings', version: '0.1.0' } });
  const status = el('rstatus');
  client.on('state', (s) => (status.textContent = s));
  const player = new Player(el('pterm'));
  const play = el<HTMLButtonElement>('pplay');
  const timeline = el<HTMLInputElement>('ptimeline');
  player.onUpdate = () => {
    play.textContent = player.playing ? '⏸' : '▶';
    timeline.max = String(Math.round(player.duration));
    timeline.value = String(Math.round(player.clock));
    el('ptime').textContent = `${fmt(player.clock)} / ${fmt(player.duration)}`;
  };
  play.addEventListener('click', () => (player.playing ? player.pause() : player.play()));
  el<HTMLSelectElement>('pspeed').addEventListener('change', (e) => player.setSpeed(Number((e.target as HTMLSelectElement).value)));
  // A drag fires input for every pixel: seek once per frame, to where the thumb is then.
  let seekFrame = 0;
  timeline.addEventListener('input', () => {
    if (seekFrame) return;
    seekFrame = requestAnimationFrame(() => {
      seekFrame = 0;
      player.seek(Number(timeline.value));
    });
  });
  el('pprev').addEventListener('click', () => player.jump(-1));
  el('pnext').addEventListener('click', () => player.jump(1));
  document.addEventListener('keydown', (e) => {
    if (e.key === ' ' && !el('player').hidden && !(e.target instanceof HTMLInputElement)) {
      e.preventDefault();
      if (player.playing) player.pause();
      else player.play();
    }
  });
  (window as unknown as { muxtermPlayer: Player }).muxtermPlayer = player;

  try {
    await client.connect();
  } catch (e) {
    showError(`Not connected: ${e instanceof Error ? e.message : String(e)}. Sign in on the terminals page first.`);
    return;
  }
  const query = new URLSearchParams(location.search);
  const list = await client.recordings(query.get('session') ?? undefined);
  const body = el('rlist').querySelector('tbody')!;
  el('rempty').hidden = list.length > 0;
  for (const r of [...list].reverse()) {
    const tr = document.createElement('tr');
    tr.dataset['recording'] = r.recording;
    const cells = [new Date(r.started).toLocaleString(), r.name || r.command || '', `${r.cols}×${r.rows}`, String(r.bytes), r.active ? 'recording' : 'ended'];
    for (const [i, text] of cells.entries()) {
      const td = document.createElement('td');
      td.textContent = text;
      if (i === 1) td.className = 'name';
      tr.append(td);
    }
    const td = document.createElement('td');
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = 'Play';
    b.addEventListener('click', () => void open(client, player, r).catch((e: unknown) => showError(String(e))));
    td.append(b);
    tr.append(td);
    body.append(tr);
  }
  const want = query.get('recording');
  const r = list.find((x) => x.recording === want);
  if (r) {
    await open(client, player, r);
    // ?t=SECONDS (a span's muxterm.recording.offset_s): the screen at that moment.
    const at = Number(query.get('t'));
    if (query.has('t') && Number.isFinite(at) && at >= 0) player.seek(player.playTime(at));
  } else if (want) showError(`No recording ${want} of yours here.`);
}

void start().catch((e: unknown) => showError(String(e)));
