package procfs

import (
	"maps"
	"testing"
)

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

func TestParseFDInfo(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string
	}{
		{"pos:\t0\nflags:\t02000002\nmnt_id:\t4\nino:\t1302427\nPid:\t4187\nNSpid:\t4187\n",
			map[string]string{"pos": "0", "flags": "02000002", "mnt_id": "4", "ino": "1302427", "Pid": "4187", "NSpid": "4187"}},
		{"pos:\t0\nflags:\t02\nmnt_id:\t25\nino:\t90\ntty-index:\t3\n",
			map[string]string{"pos": "0", "flags": "02", "mnt_id": "25", "ino": "90", "tty-index": "3"}},
		// An epoll instance: one tfd line per watched descriptor, the first kept.
		{"pos:\t0\nflags:\t02\nmnt_id:\t16\nino:\t1057\ntfd:        5 events:       19 data:                5  pos:0 ino:2b mnt:16\ntfd:        7 events:       19 data:                7  pos:0 ino:2c mnt:16\n",
			map[string]string{"pos": "0", "flags": "02", "mnt_id": "16", "ino": "1057", "tfd": "5 events:       19 data:                5  pos:0 ino:2b mnt:16"}},
		{"", map[string]string{}},
	} {
		if got := ParseFDInfo([]byte(c.in)); !maps.Equal(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.in, got, c.want)
		}
	}
}
