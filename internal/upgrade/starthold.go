//go:build muxterm_starthold

package upgrade

// A build for one test only (go build -tags muxterm_starthold): an image started by an upgrade
// waits at its start, before internal/earlysignal, for the test (internal/earlysignal/starthold).
import _ "github.com/muxterm/muxterm/internal/earlysignal/starthold"
