// The page benchmark's probe, evaluated in every page before its own scripts
// (Page.addScriptToEvaluateOnNewDocument). It counts xterm.js's "write data discarded" warnings
// and long tasks from the start, wraps the WebGL draw calls (the draw hook), and times key to
// glyph and bulk output when cmd/pagebench arms it. Which page it is in (muxterm's UI or
// ttyd's) only changes how a visible row of the terminal's buffer is read.
(() => {
  const pb = (window.__pb = { discards: 0, longtasks: [], onDraw: null, renderer: 'dom' });
  const warn = console.warn.bind(console);
  console.warn = (...a) => {
    if (a.some((x) => typeof x === 'string' && x.includes('write data discarded'))) pb.discards++;
    warn(...a);
  };
  try {
    new PerformanceObserver((l) => {
      for (const e of l.getEntries()) pb.longtasks.push([e.startTime, e.duration]);
    }).observe({ type: 'longtask', buffered: true });
  } catch (e) {
    pb.longtaskError = String(e);
  }
  for (const C of [window.WebGLRenderingContext, window.WebGL2RenderingContext]) {
    if (!C) continue;
    for (const m of ['drawArrays', 'drawElements', 'drawArraysInstanced', 'drawElementsInstanced']) {
      const f = C.prototype[m];
      if (!f) continue;
      C.prototype[m] = function (...a) {
        const r = f.apply(this, a);
        if (pb.onDraw) pb.onDraw();
        return r;
      };
    }
  }

  // ready: the terminal is up and connected.
  pb.ready = () =>
    window.muxterm
      ? window.muxterm.state() === 'connected' && window.muxterm.tabs().length > 0
      : !!(window.term && window.term.buffer);
  // hasRow: a visible row of the active terminal's buffer reads text (right-trimmed).
  pb.hasRow = (text) => {
    if (window.muxterm) return window.muxterm.cellRect(text, 0) !== null;
    const t = window.term;
    const b = t.buffer.active;
    for (let r = 0; r < t.rows; r++) if (b.getLine(b.viewportY + r)?.translateToString(true) === text) return true;
    return false;
  };
  // screen: the visible rows, for error messages.
  pb.screen = () => {
    if (window.muxterm) return window.muxterm.bufferText().slice(-2000);
    const t = window.term;
    const b = t.buffer.active;
    const out = [];
    for (let r = 0; r < t.rows; r++) out.push(b.getLine(b.viewportY + r)?.translateToString(true));
    return out.join('\n').trimEnd();
  };
  const visible = () => [...document.querySelectorAll('.xterm')].find((e) => e.offsetParent !== null);
  pb.focus = () => {
    const x = visible();
    const ta = x && x.querySelector('textarea');
    if (ta) ta.focus();
    pb.renderer = x && x.querySelector('.xterm-rows') ? 'dom' : 'webgl';
    return pb.renderer;
  };
  // domHas: a row of the DOM renderer shows text.
  const domHas = (rows, text) => {
    const want = text.trimEnd();
    for (const r of rows.children) if (r.textContent.replace(/\u00a0/g, ' ').trimEnd() === want) return true;
    return false;
  };

  // arm(row, bulk): the next keydown starts the clock; the first frame whose render shows a row
  // reading `row` stops it: on the DOM renderer the MutationObserver callback after the rows
  // changed, on WebGL the draw call after which the buffer holds the row. With bulk, the frames
  // between are recorded too. pb.result is the promise of the figures.
  pb.arm = (row, bulk) => {
    const x = visible();
    const rows = x && x.querySelector('.xterm-rows');
    let kd = null, kdNow = 0, done = false, rendered = false, frames = 0, renders = 0, last = 0, mo = null;
    const gaps = [];
    const onKey = (e) => {
      if (kd !== null) return;
      kd = e.timeStamp;
      kdNow = performance.now();
      if (bulk) {
        last = performance.now();
        requestAnimationFrame(tick);
      }
    };
    const tick = (now) => {
      if (done) return;
      frames++;
      gaps.push(now - last);
      last = now;
      if (rendered) renders++;
      rendered = false;
      requestAnimationFrame(tick);
    };
    window.addEventListener('keydown', onKey, true);
    pb.result = new Promise((resolve) => {
      const finish = () => {
        if (done || kd === null) return;
        const end = performance.now();
        done = true;
        window.removeEventListener('keydown', onKey, true);
        pb.onDraw = null;
        if (mo) mo.disconnect();
        const r = { key_ms: end - kd, delivery_ms: kdNow - kd, start: kd, end };
        if (bulk) Object.assign(r, { frames, renders, gaps });
        resolve(r);
      };
      if (rows) {
        mo = new MutationObserver(() => {
          rendered = true;
          if (domHas(rows, row)) finish();
        });
        mo.observe(rows, { subtree: true, childList: true, characterData: true });
      } else {
        pb.onDraw = () => {
          rendered = true;
          if (kd !== null && pb.hasRow(row)) finish();
        };
      }
    });
    return rows ? 'dom' : 'webgl';
  };
  // longtasksIn: the long tasks that started in [start, end], as durations in ms.
  pb.longtasksIn = (start, end) => pb.longtasks.filter(([s]) => s >= start && s <= end).map(([, d]) => d);
})();
