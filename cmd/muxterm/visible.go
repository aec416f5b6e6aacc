package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// visible returns s with every control character escaped where a terminal would act on it:
// C0 (ESC among them), DEL and C1 as \xNN (\u0080 … \u009f for C1 written in UTF-8), and a byte
// that is not UTF-8 as \xNN (a lone 0x9b is CSI to an 8-bit terminal). Everything the CLI prints
// that a gateway sent (names, commands, ids, reasons, error messages) goes through it: a session
// named "\x1b]0;pwned\a\x1b[2J" must not retitle and clear the terminal of whoever lists it.
func visible(s string) string {
	clean := true
	for _, r := range s {
		if isControl(r) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && isControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case isControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// isControl reports a C0 control, DEL or a C1 control.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) }

// visibleLines is visible over each line of s (errors.Join's, say), the line breaks kept.
func visibleLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = visible(l)
	}
	return strings.Join(lines, "\n")
}

// visibleAll is visible over each of ss.
func visibleAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = visible(s)
	}
	return out
}

// jsonVisible escapes DEL and C1 in JSON text (encoding/json escapes C0 itself, and replaces
// bytes that are not UTF-8): they can only be inside strings, where \u007f is the same value.
func jsonVisible(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			if out == nil {
				out = append([]byte(nil), b[:i]...)
			}
			out = fmt.Appendf(out, `\u%04x`, r)
		} else if out != nil {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	if out == nil {
		return b
	}
	return out
}
