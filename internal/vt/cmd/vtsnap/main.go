// Command vtsnap replays a recording of internal/vt's corpus through the terminal model and
// prints, as JSON, the final size, the model's snapshot (with up to 1000 history lines) and
// its screen as text. packages/client's reference test compares xterm.js against it.
//
//	vtsnap file.rec
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/muxterm/muxterm/internal/vt"
	"github.com/muxterm/muxterm/internal/vt/internal/corpus"
)

// Scrollback is the history the model keeps and the snapshot carries.
const Scrollback = 1000

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vtsnap:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: vtsnap file.rec")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	rs, err := corpus.Parse(b)
	if err != nil {
		return err
	}
	var t *vt.Terminal
	for _, r := range rs {
		switch {
		case r.Data == nil && t == nil:
			t = vt.New(r.Cols, r.Rows, vt.Options{ScrollbackLines: Scrollback})
		case r.Data == nil:
			t.Resize(r.Cols, r.Rows)
		case t == nil:
			return fmt.Errorf("%s: output before the first size", args[0])
		default:
			t.Write(r.Data)
		}
	}
	if t == nil {
		return fmt.Errorf("%s: empty", args[0])
	}
	cols, rows := t.Size()
	so := vt.SnapshotOptions{ScrollbackLines: Scrollback}
	return json.NewEncoder(os.Stdout).Encode(struct {
		Cols     int    `json:"cols"`
		Rows     int    `json:"rows"`
		Snapshot []byte `json:"snapshot"` // base64
		Text     string `json:"text"`
	}{cols, rows, t.AppendSnapshot(nil, so), string(t.AppendText(nil, vt.SnapshotOptions{}))})
}
