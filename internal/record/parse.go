package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxTime bounds an event's time, in seconds (about 31 years): a player's durations stay in
// range.
const MaxTime = 1e9

// MaxLine bounds one line of a recording that Parse reads: a longer one is an error, not a
// buffer that grows without end.
const MaxLine = 4 << 20

// Event is one event of a recording: At seconds from its start, Code "o", "i", "r" or "m"
// (others are kept, for a newer writer's), and Data.
type Event struct {
	At   float64
	Code string
	Data string
}

// Parser reads a recording strictly, line by line: a header that says version 2 with a size,
// then events whose times never go back. Every error names the line.
type Parser struct {
	sc     *bufio.Scanner
	line   int
	last   float64
	Header Header
}

// NewParser reads the header of the recording r.
func NewParser(r io.Reader) (*Parser, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	p := &Parser{sc: sc}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, p.errf("header: %w", err)
		}
		return nil, errors.New("record: empty: no asciicast header")
	}
	p.line = 1
	if err := json.Unmarshal(sc.Bytes(), &p.Header); err != nil {
		return nil, p.errf("header: not an asciicast v2 header: %w", err)
	}
	if p.Header.Version != 2 {
		return nil, p.errf("header: version %d, want 2", p.Header.Version)
	}
	if p.Header.Width < 1 || p.Header.Height < 1 || p.Header.Width > math.MaxUint16 || p.Header.Height > math.MaxUint16 {
		return nil, p.errf("header: size %dx%d out of range", p.Header.Width, p.Header.Height)
	}
	return p, nil
}

func (p *Parser) errf(format string, a ...any) error {
	return fmt.Errorf("record: line %d: %w", p.line, fmt.Errorf(format, a...))
}

// Next returns the next event, or io.EOF after the last.
func (p *Parser) Next() (Event, error) {
	for p.sc.Scan() {
		p.line++
		b := bytes.TrimSpace(p.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var raw [3]json.RawMessage
		var all []json.RawMessage
		if err := json.Unmarshal(b, &all); err != nil || len(all) != 3 {
			return Event{}, p.errf("not an event [time, code, data]")
		}
		copy(raw[:], all)
		var e Event
		if err := json.Unmarshal(raw[0], &e.At); err != nil || math.IsNaN(e.At) || e.At < 0 || e.At > MaxTime {
			return Event{}, p.errf("time %s is not a number of seconds from 0 to %g", raw[0], float64(MaxTime))
		}
		if e.At < p.last {
			return Event{}, p.errf("time %.6f goes back from %.6f", e.At, p.last)
		}
		p.last = e.At
		if err := json.Unmarshal(raw[1], &e.Code); err != nil || e.Code == "" {
			return Event{}, p.errf("code %s is not a string", raw[1])
		}
		if err := json.Unmarshal(raw[2], &e.Data); err != nil {
			return Event{}, p.errf("data %.40s is not a string", raw[2])
		}
		return e, nil
	}
	if err := p.sc.Err(); err != nil {
		return Event{}, p.errf("%w", err)
	}
	return Event{}, io.EOF
}
