package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/muxterm/muxterm/session"
)

func TestHandoverCheck(t *testing.T) {
	cur := strconv.Itoa(session.HandoverVersion)
	for _, tc := range []struct {
		args    []string
		handled bool
		code    int
		says    string
	}{
		{nil, false, 0, ""},
		{[]string{"--listen", "x"}, false, 0, ""},
		{[]string{"--handover-check", cur}, true, 0, "can adopt"},
		{[]string{"--handover-check", "99"}, true, 3, "cannot adopt handover state version 99"},
		{[]string{"--handover-check", "x"}, true, 3, "cannot adopt"},
		{[]string{"--handover-check"}, true, 2, "usage"},
		{[]string{"--handover-check", cur, "--listen", "127.0.0.1:0", "--kill-grace", "1s"}, true, 0, "can adopt"},
		{[]string{"--handover-check", cur, "--no-such-flag"}, true, 3, "cannot start with this configuration"},
		{[]string{"--handover-check", cur, "--kill-grace", "-1s"}, true, 3, "cannot start with this configuration"},
		{[]string{"--handover-check", cur, "--tokens", "/nonexistent/tokens"}, true, 3, "cannot start with this configuration"},
		{[]string{"--handover-check", cur, "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"}, true, 3, "--tls-cert/--tls-key"},
		{[]string{"--handover-check", cur, "--tokens", "/dev/fd/3"}, true, 3, "--tokens /dev/fd/3 names a descriptor inherited at start"},
		{[]string{"--handover-check", cur, "--tls-cert", "/proc/self/fd/4", "--tls-key", "/k"}, true, 3, "--tls-cert /proc/self/fd/4 names a descriptor"},
	} {
		var out bytes.Buffer
		handled, code := handoverCheck(tc.args, &out)
		if handled != tc.handled || code != tc.code || !strings.Contains(out.String(), tc.says) {
			t.Errorf("handoverCheck(%q) = %v, %d, %q; want %v, %d, containing %q",
				tc.args, handled, code, out.String(), tc.handled, tc.code, tc.says)
		}
	}
}
