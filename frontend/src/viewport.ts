// xterm.js 6 keeps its scrollbar in step with the buffer on every line that scrolls it
// (Viewport._sync on the buffer's scroll event). While the scrollback grows, each line changes
// the scrollbar's height and position, and each change reveals the scrollbar and re-arms its
// hide timer (a clearTimeout and a setTimeout per line): a fifth to a quarter of the page's time in
// `seq 1 100000` on a fresh terminal, where ttyd's page (xterm.js 5) syncs once per frame.
// Once the scrollback is full, a line changes neither and costs little.
//
// lightenViewport brings back the sync once per frame: a sync the buffer's scroll asks for
// runs at the next animation frame, once, with the buffer's position then; a sync that names
// a position (the scrollbar's own requests) still runs at once. The scrollbar is revealed by the
// pointer, not by output. Both reach into xterm.js's internals; where they are not as expected
// (another xterm.js), nothing changes.
import type { Terminal } from '@xterm/xterm';

interface ViewportInternals {
  _sync?: (ydisp?: number) => void;
  _scrollableElement?: { setRevealOnScroll?: (reveal: boolean) => void };
}

/** Makes the terminal's scrollbar follow output once per frame; false if it could not. */
export function lightenViewport(term: Terminal): boolean {
  const vp = (term as unknown as { _core?: { _viewport?: ViewportInternals } })._core?._viewport;
  const sync = vp?._sync;
  const reveal = vp?._scrollableElement?.setRevealOnScroll;
  if (!vp || typeof sync !== 'function' || typeof reveal !== 'function') return false;
  reveal.call(vp._scrollableElement, false);
  let frame = 0;
  vp._sync = (ydisp?: number): void => {
    if (ydisp !== undefined) {
      sync.call(vp, ydisp);
      return;
    }
    if (frame !== 0) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      if (term.element?.isConnected) sync.call(vp); // not once the tab is gone
    });
  };
  return true;
}
