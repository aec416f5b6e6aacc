package session

// ring is a bounded byte buffer in which every byte ever appended has a monotonically
// increasing 64-bit offset. It keeps the newest max bytes; older ones are overwritten. The
// backing array grows as output arrives (doubling, up to max), so an idle session costs little.
//
// ring is not safe for concurrent use: Session.mu guards it.
type ring struct {
	buf []byte // backing array; len(buf) grows up to max
	// tags, for a pipe session's ring (newTaggedRing), holds the stream of each byte of buf at
	// the same index (Stdout, Stderr); nil for a PTY's ring.
	tags   []byte
	tagged bool
	max    int
	head   int   // index in buf of the byte at offset start
	start  int64 // offset of the oldest retained byte
	end    int64 // offset one past the newest byte
}

const ringMinAlloc = 4 << 10

func newRing(limit int) ring {
	return ring{max: max(limit, 1)}
}

// newTaggedRing is newRing whose bytes each carry their stream (appendTagged, readStream).
func newTaggedRing(limit int) ring {
	r := newRing(limit)
	r.tagged = true
	return r
}

func (r *ring) size() int { return int(r.end - r.start) }

// append copies p into the ring, dropping the oldest bytes when it would exceed max.
func (r *ring) append(p []byte) { r.appendTagged(p, Stdout) }

// appendTagged is append of bytes of stream tag (kept only in a tagged ring).
func (r *ring) appendTagged(p []byte, tag Stream) {
	if len(p) == 0 {
		return
	}
	if len(p) > r.max {
		// Only the last max bytes can survive; the rest are lost to every reader.
		skip := len(p) - r.max
		r.end += int64(skip)
		r.start = r.end
		r.head = 0
		p = p[skip:]
	}
	if need := r.size() + len(p); need > len(r.buf) {
		r.grow(need)
	}
	n := len(r.buf)
	tail := (r.head + r.size()) % n
	c := copy(r.buf[tail:], p)
	copy(r.buf, p[c:])
	if r.tagged {
		fill(r.tags[tail:tail+c], byte(tag))
		fill(r.tags[:len(p)-c], byte(tag))
	}
	r.end += int64(len(p))
	if over := r.size() - n; over > 0 {
		r.start += int64(over)
		r.head = (r.head + over) % n
	}
}

// grow resizes the backing array toward need bytes (doubling, capped at max) and lays the
// retained bytes out from index 0.
func (r *ring) grow(need int) {
	if len(r.buf) >= r.max {
		return
	}
	size := max(len(r.buf)*2, ringMinAlloc)
	for size < need {
		size *= 2
	}
	size = min(size, r.max)
	nb := make([]byte, size)
	var nt []byte
	if r.tagged {
		nt = make([]byte, size)
	}
	if r.size() > 0 {
		r.copyOut(nb[:r.size()], r.start)
		if r.tagged {
			copyRing(nt[:r.size()], r.tags, r.head)
		}
	}
	r.buf, r.tags, r.head = nb, nt, 0
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// copyRing copies len(dst) bytes of the circular buf from index pos into dst.
func copyRing(dst, buf []byte, pos int) {
	c := copy(dst, buf[pos:])
	copy(dst[c:], buf)
}

// copyOut copies the retained bytes at [off, off+len(dst)) into dst.
func (r *ring) copyOut(dst []byte, off int64) {
	copyRing(dst, r.buf, (r.head+int(off-r.start))%len(r.buf))
}

// readAt copies retained bytes starting at off into p. If off is older than the ring's start
// it reads from the start instead and reports how many bytes were lost. It returns the number
// of bytes copied, the bytes lost, and the offset after the last byte copied.
func (r *ring) readAt(p []byte, off int64) (n int, lost int64, next int64) {
	if off < r.start {
		lost = r.start - off
		off = r.start
	}
	avail := r.end - off
	if avail <= 0 || len(p) == 0 {
		return 0, lost, off
	}
	n = int(min(avail, int64(len(p))))
	r.copyOut(p[:n], off)
	return n, lost, off + int64(n)
}

// readStream is readAt for a tagged ring: it stops where the stream changes, and returns the
// stream of the bytes copied (Stdout when none were, and always for an untagged ring).
func (r *ring) readStream(p []byte, off int64) (n int, lost int64, next int64, tag Stream) {
	n, lost, next = r.readAt(p, off)
	if !r.tagged || n == 0 {
		return n, lost, next, Stdout
	}
	first := next - int64(n)
	pos := (r.head + int(first-r.start)) % len(r.tags)
	tag = Stream(r.tags[pos])
	for i := 1; i < n; i++ {
		if Stream(r.tags[(pos+i)%len(r.tags)]) != tag {
			return i, lost, first + int64(i), tag
		}
	}
	return n, lost, next, tag
}
