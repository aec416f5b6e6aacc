// The muxterm browser UI: one socket, one xterm.js terminal per session tab. This is the bundle's
// entry (scripts/build.mjs): the one place that runs anything. The modules only define:
//   app.ts       the page's state (App) and its start
//   tab.ts       a tab: its terminal, size, renderer, rendering, the layout kept across reloads
//   pace.ts      a hidden tab's output yields to typing in the visible tab
//   actions.ts   new, restart, reattach, close (with its confirmation), detach
//   detached.ts  the detached-sessions panel
//   shortcuts.ts the keyboard shortcuts, search and help
//   signin.ts    the sign-in panel and the token checks
//   settings.ts  font size, theme, renderer and the clipboard's, kept in localStorage
//   clipboard.ts OSC 52, copy on select
//   keybar.ts    the key bar of touch devices, touch scrolling
// testhook.ts (window.muxterm, through which the browser tests drive the page) is an entry of
// its own, dist-test/testhook.js, which the browser tests load and the gateway never serves.
import { start } from './app';

start();
