// xterm.js 6 keeps its scrollbar in step with the buffer on every line that scrolls it
// (Viewport._sync on the buffer's scroll event). While the scrollback grows, each line changes
// the scrollbar's height and position, and each change reveals the scrollbar and re-arms its
// hide timer (a clearTimeout and a setTimeout per line): a fifth to a quarter of the page's
// time in `seq 1 100000` on a fresh terminal. ttyd's page, on xterm.js 5, syncs once per frame.
// Once the scrollback is full, a line changes neither and costs little.
//
// lightenViewport makes the buffer's scroll ask for one sync at the next animation frame, with
// the buffer's position then, and that sync does not reveal the scrollbar (output is not the
// user scrolling). A sync xterm.js queues itself (a resize, a buffer switch: queueSync) still
// runs at once. Anything the user scrolls with (the wheel, a pointer, a touch, a key; and
// xterm.js's own scrollLines and scrollToLine) first syncs what is pending, since a scroll is
// worked out from the scrollbar's position: from a stale one it would land rows away from where
// it was meant to (a key pressed while scrolled back would stop short of the bottom). Both
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
  for (const type of ['wheel', 'mousedown', 'touchstart', 'keydown']) {
    term.element.addEventListener(type, flush, { capture: true, passive: true });
  }
  return true;
}
