// Package corpus reads and writes the recordings of real programs' output that internal/vt's
// tests replay (testdata/corpus/*.rec).
//
// A recording is a sequence of records, each a header line and, for output, its bytes:
//
//	W <cols> <rows>\n     the terminal's size from here on (the first record gives the start size)
//	D <n>\n<n bytes>       n bytes the program wrote
//
// Nothing separates a D record's bytes from the next header.
package corpus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Record is a resize (Data nil) or some output.
type Record struct {
	Cols, Rows int
	Data       []byte
}

// Parse parses a recording.
func Parse(b []byte) ([]Record, error) {
	var rs []Record
	r := bufio.NewReader(bytes.NewReader(b))
	for {
		h, err := r.ReadString('\n')
		if err == io.EOF && h == "" {
			return rs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("corpus: header %q: %w", h, err)
		}
		f := strings.Fields(h)
		switch {
		case len(f) == 3 && f[0] == "W":
			c, err1 := strconv.Atoi(f[1])
			rw, err2 := strconv.Atoi(f[2])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("corpus: %q: %w", h, err)
			}
			rs = append(rs, Record{Cols: c, Rows: rw})
		case len(f) == 2 && f[0] == "D":
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("corpus: %q: bad length", h)
			}
			d := make([]byte, n)
			if _, err := io.ReadFull(r, d); err != nil {
				return nil, fmt.Errorf("corpus: data of %q: %w", h, err)
			}
			rs = append(rs, Record{Data: d})
		default:
			return nil, fmt.Errorf("corpus: bad header %q", h)
		}
	}
}

// AppendResize appends a W record.
func AppendResize(dst []byte, cols, rows int) []byte {
	return fmt.Appendf(dst, "W %d %d\n", cols, rows)
}

// AppendData appends a D record.
func AppendData(dst, data []byte) []byte {
	dst = fmt.Appendf(dst, "D %d\n", len(data))
	return append(dst, data...)
}
