package main

// Replay must not type into the shell. A session's replayed output may hold terminal queries
// (DA1 ESC[c, DSR ESC[6n, OSC 10/11 colour queries, DECRQM ESC[?…$p, DCS requests) that the
// program sent long ago; the local terminal answers them on stdin as if they were new. attach
// counts the DA1 queries in what it writes up to the end of the replay, writes its own DA1 query
// (the sentinel) right after, and until the terminal has answered them all (the sentinel's
// answer comes last: terminals answer in order) or replyDeadline has passed since the sentinel,
// drops from stdin every byte sequence shaped like a terminal reply; keystrokes pass.

import "time"

// sentinel is the DA1 query attach writes after the replay.
const sentinel = "\x1b[c"

// replyDeadline bounds the wait for the sentinel's answer (a terminal that does not answer DA1).
const replyDeadline = time.Second

// maxSeq bounds an escape sequence held or tracked; longer ones are taken as done.
const maxSeq = 4096

// queryCounter follows output through escape sequences, counting DA1 queries (ESC[c, ESC[0c)
// and knowing whether it is between sequences, where the sentinel can be written.
type queryCounter struct {
	state int // 0 ground, 1 after ESC, 2 CSI, 3 string (OSC, DCS, APC, PM, SOS), 4 ESC in a string
	seq   []byte
	da1   int
}

func (q *queryCounter) ground() bool { return q.state == 0 }

func (q *queryCounter) feed(p []byte) {
	for _, b := range p {
		switch q.state {
		case 0:
			if b == 0x1b {
				q.state = 1
			}
		case 1:
			switch b {
			case '[':
				q.state, q.seq = 2, q.seq[:0]
			case ']', 'P', '_', '^', 'X':
				q.state, q.seq = 3, q.seq[:0]
			case 0x1b:
			default:
				q.state = 0
			}
		case 2:
			switch {
			case b >= 0x40 && b <= 0x7e:
				if b == 'c' && (len(q.seq) == 0 || string(q.seq) == "0") {
					q.da1++
				}
				q.state = 0
			case b >= 0x20 && b <= 0x3f && len(q.seq) < maxSeq:
				q.seq = append(q.seq, b)
			case b == 0x1b:
				q.state = 1
			default:
				q.state = 0
			}
		case 3, 4:
			switch {
			case b == 0x07 || (q.state == 4 && b == '\\'):
				q.state = 0
			case b == 0x1b:
				q.state = 4
			case len(q.seq) >= maxSeq:
				q.state = 0
			default:
				q.state = 3
				q.seq = append(q.seq, 0)
			}
		}
	}
}

// replyFilter drops terminal replies from stdin while armed. It is armed from the attach until
// it has seen want+1 DA1 replies once want is known (want < 0 until the sentinel is written), or
// until disarm.
type replyFilter struct {
	armed bool
	want  int // DA1 queries written before the sentinel; -1 until it is written
	seen  int // DA1 replies dropped
	pend  []byte
}

func newReplyFilter(armed bool) *replyFilter { return &replyFilter{armed: armed, want: -1} }

// sentinelSent records that the sentinel followed queries DA1 queries.
func (f *replyFilter) sentinelSent(queries int) {
	f.want = queries
}

// disarm ends filtering and returns what was held back.
func (f *replyFilter) disarm() []byte {
	f.armed = false
	p := f.pend
	f.pend = nil
	return p
}

// feed returns the bytes of in that are not terminal replies.
func (f *replyFilter) feed(in []byte) []byte {
	if !f.armed {
		return in
	}
	out := make([]byte, 0, len(in))
	for i, b := range in {
		if !f.armed {
			return append(out, in[i:]...)
		}
		if len(f.pend) == 0 {
			if b == 0x1b {
				f.pend = append(f.pend, b)
			} else {
				out = append(out, b)
			}
			continue
		}
		f.pend = append(f.pend, b)
		switch f.pend[1] {
		case '[':
			if len(f.pend) == 2 {
				continue
			}
			switch {
			case b >= 0x40 && b <= 0x7e: // final byte
				seq := f.pend
				f.pend = f.pend[:0]
				switch b {
				case 'c', 'R', 'n', 'y':
					if b == 'c' && seq[2] == '?' {
						f.seen++
						if f.want >= 0 && f.seen > f.want {
							f.armed = false
						}
					}
				default:
					out = append(out, seq...) // a key (arrows, F-keys, ...)
				}
			case b >= 0x20 && b <= 0x3f && len(f.pend) < 64:
			default:
				out = f.passPending(out)
			}
		case ']', 'P', '_', '^':
			switch {
			case b == 0x07 && f.pend[1] == ']', b == '\\' && f.pend[len(f.pend)-2] == 0x1b:
				f.pend = f.pend[:0] // an OSC or DCS reply: dropped
			case len(f.pend) >= maxSeq:
				f.pend = f.pend[:0]
			}
		default: // ESC and a key: Alt-key, SS3 keys, or ESC ESC
			out = f.passPending(out)
		}
	}
	return out
}

// passPending sends on a held sequence that is not a reply, keeping a trailing ESC held as the
// start of the next one.
func (f *replyFilter) passPending(out []byte) []byte {
	last := f.pend[len(f.pend)-1]
	if last == 0x1b {
		out = append(out, f.pend[:len(f.pend)-1]...)
		f.pend = append(f.pend[:0], 0x1b)
		return out
	}
	out = append(out, f.pend...)
	f.pend = f.pend[:0]
	return out
}
