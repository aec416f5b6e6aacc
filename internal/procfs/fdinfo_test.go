package procfs

import "testing"

func TestParseFDInfoFlags(t *testing.T) {
	for _, c := range []struct {
		in       string
		flags    uint64
		writable bool
		ok       bool
	}{
		{"pos:\t0\nflags:\t02000000\nmnt_id:\t15\nino:\t1234\n", 02000000, false, true},
		{"pos:\t0\nflags:\t02000001\nmnt_id:\t15\n", 02000001, true, true},
		{"pos:\t0\nflags:\t02100002\n", 02100002, true, true},
		{"pos:\t0\nflags:\t012000000\n", 012000000, false, true}, // O_PATH: no access mode
		{"pos:\t0\nflags:\t09\n", 0, false, false},               // not octal
		{"pos:\t0\nmnt_id:\t15\n", 0, false, false},              // no flags line
	} {
		flags, err := ParseFDInfoFlags([]byte(c.in))
		if (err == nil) != c.ok || flags != c.flags || (err == nil && Writable(flags) != c.writable) {
			t.Errorf("%q: %o, %v (writable %v); want %o, ok %v, writable %v", c.in, flags, err, Writable(flags), c.flags, c.ok, c.writable)
		}
	}
}
