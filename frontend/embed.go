// Package frontend embeds the built xterm.js UI.
//
// `npm ci && npm run build` in this directory fills dist/ (index.html, app.js, app.css,
// xterm.css and their source maps). Only dist/.gitkeep is committed, so a Go build without the
// npm build embeds an empty UI.
package frontend

import "embed"

// Dist holds dist/: serve it with fs.Sub(Dist, "dist").
//
//go:embed all:dist
var Dist embed.FS
