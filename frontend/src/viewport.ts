// xterm.js 6 keeps its scrollbar in step with the buffer on every line that scrolls it
// (Viewport._sync on the buffer's scroll event). While the scrollback grows, each line changes
// the scrollbar's height and position, and each change reveals the scrollbar and re-arms its
// hide timer (a clearTimeout and a setTimeout per line): a fifth to a quarter of the page's
// time in `seq 1 100000` on a fresh terminal. ttyd's page, on xterm.js 5, syncs once per frame.
// Once the scrollback is full, a line changes neither and costs little.
//
// lightenViewport makes a sync without a position (the buffer's scroll asks for one per line;
// xterm.js's own queued sync after a resize or a buffer switch may too) wait for the next
// animation frame and run once, with the buffer's position then, without revealing the
// scrollbar (output is not the user scrolling). A sync that names a position runs at once.
// Every scroll worked out from the scrollbar's position first runs the pending sync: the wheel
// and the scrollbar's own slider and track (pointerdown, which covers mouse, touch and pen), a
// key, and xterm.js's scrollLines and scrollToLine, through which its other scrolls go (pages,
// the bottom on input, search, selection, the key bar's touch scrolling). From a stale position
// a scroll would land rows away from where it was meant to, or stop short of the bottom. Both
// reach into xterm.js's internals; where they are not as expected (another xterm.js), nothing
// changes.
import type { Terminal } from '@xterm/xterm';

interface ViewportInternals {
  _sync?: (ydisp?: number) => void;
  scrollLines?: (disp: number) => void;
  scrollToLine?: (line: number, disableSmoothScroll?: boolean) => void;
  _scrollableElement?: { setRevealOnScroll?: (reveal: boolean) => void };
}

/** Makes the terminal's scrollbar follow output once per frame; false if it could not. */
export function lightenViewport(term: Terminal): boolean {
  const vp = (term as unknown as { _core?: { _viewport?: ViewportInternals } })._core?._viewport;
  const el = vp?._scrollableElement;
  const sync = vp?._sync;
  const reveal = el?.setRevealOnScroll;
  const { scrollLines, scrollToLine } = vp ?? {};
  if (!vp || !el || !term.element || typeof sync !== 'function' || typeof reveal !== 'function' ||
    typeof scrollLines !== 'function' || typeof scrollToLine !== 'function') {
    return false;
  }
  let frame = 0;
  const syncQuietly = (): void => {
    if (!term.element?.isConnected) return; // the tab is gone: its viewport is disposed
    reveal.call(el, false);
    try {
      sync.call(vp);
    } finally {
      reveal.call(el, true);
    }
  };
  // flush runs the pending sync now, before a scroll that is worked out from the scrollbar.
  const flush = (): void => {
    if (frame === 0) return;
    cancelAnimationFrame(frame);
    frame = 0;
    syncQuietly();
  };
  vp._sync = (ydisp?: number): void => {
    if (ydisp !== undefined) {
      flush();
      sync.call(vp, ydisp);
      return;
    }
    if (frame !== 0) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      syncQuietly();
    });
  };
  vp.scrollLines = (disp: number): void => {
    flush();
    scrollLines.call(vp, disp);
  };
  vp.scrollToLine = (line: number, disableSmoothScroll?: boolean): void => {
    flush();
    scrollToLine.call(vp, line, disableSmoothScroll);
  };
  for (const type of ['wheel', 'pointerdown', 'keydown']) {
    term.element.addEventListener(type, flush, { capture: true, passive: true });
  }
  return true;
}
