package session

import (
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"
)

func readersRunning() bool {
	readers.mu.Lock()
	defer readers.mu.Unlock()
	return readers.ep != nil
}

// Many sessions streaming at once through the shared workers: each viewer gets its own
// session's output exactly, in order, with nothing lost, repeated or taken from another.
func TestConcurrentStreamsAreExact(t *testing.T) {
	t.Parallel()
	const sessions, lines = 8, 30000
	type stream struct {
		s    *Session
		c    *collector
		want []byte
	}
	streams := make([]stream, sessions)
	for i := range streams {
		// A different first number per session, so a chunk read from the wrong master would
		// not match.
		from := 1 + i*1000000
		var want []byte
		for k := from; k < from+lines; k++ {
			want = strconv.AppendInt(want, int64(k), 10)
			want = append(want, '\n')
		}
		s := spawnT(t, testOptions(), "/bin/sh", "-c",
			fmt.Sprintf("stty raw -echo; seq %d %d", from, from+lines-1))
		wake, wakeFn := wakeChan()
		v, _, err := s.Subscribe(0, wakeFn)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = stream{s: s, c: collect(t, v, wake, nil), want: want}
	}
	for i, st := range streams {
		if err := st.c.waitEnd(t, 60*time.Second); err != io.EOF {
			t.Fatalf("session %d: viewer end: got %v, want %v", i, err, io.EOF)
		}
		got, gaps, _ := st.c.result()
		if len(gaps) != 0 {
			t.Errorf("session %d: gaps %v, want none (the ring holds the whole stream)", i, gaps)
		}
		checkStream(t, fmt.Sprintf("session %d", i), got, gaps, st.want)
	}
}
