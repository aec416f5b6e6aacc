package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// cmdCapture prints what is on a session's screen (tmux's capture-pane): its text, or with
// --ansi a paint that redraws it on a terminal of the session's size.
func (a *app) cmdCapture(args []string) error {
	fs := a.flagSet("capture")
	ansi := fs.Bool("ansi", false, "")
	history := fs.Int("scrollback", 0, "")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"capture needs one session id or name"}
	}
	if *history < 0 || *history > proto.MaxCaptureScrollback {
		return usageError{fmt.Sprintf("--scrollback must be between 0 and %d lines", proto.MaxCaptureScrollback)}
	}
	return a.withClient(func(ctx context.Context, c *client.Client) error {
		s, err := resolveSession(ctx, c, pos[0])
		if err != nil {
			return err
		}
		res, err := c.Capture(ctx, s.Session, client.CaptureOptions{ANSI: *ansi, Scrollback: *history})
		if err != nil {
			return fmt.Errorf("capture %s: %w", s.Session, err)
		}
		if *ansi {
			_, err = fmt.Fprint(a.stdout, res.Screen) // a paint: escapes on purpose
		} else {
			// Text holds no control character but newlines; a hostile gateway's are escaped.
			_, err = fmt.Fprint(a.stdout, visibleLines(res.Screen))
		}
		return err
	})
}

// cmdSend types keys into a session (tmux's send-keys): each argument is a key name (Enter,
// C-c, Up, F5, ...) or, if it is none, text typed as is; with -l every argument is text.
// Arrow and keypad keys are encoded for the modes the program set, as its terminal would.
func (a *app) cmdSend(args []string) error {
	fs := a.flagSet("send")
	literal := fs.Bool("l", false, "")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usageError{"send needs a session id or name, then keys"}
	}
	return a.withClient(func(ctx context.Context, c *client.Client) error {
		s, err := resolveSession(ctx, c, pos[0])
		if err != nil {
			return err
		}
		// The modes decide the arrows' encoding; a gateway without screens has none to give.
		var modes proto.ScreenModes
		if res, err := c.Capture(ctx, s.Session, client.CaptureOptions{}); err == nil {
			modes = res.Modes
		}
		var in []byte
		for _, arg := range pos[1:] {
			in = append(in, encodeKeys(arg, *literal, modes)...)
		}
		end := int64(1<<53 - 1)
		info, err := c.List(ctx)
		if err == nil {
			for _, e := range info {
				if e.Session == s.Session {
					end = e.End
				}
			}
		}
		// Bound without a size (it sizes nothing) and from the end (it replays nothing).
		ch, _, err := c.AttachWith(ctx, s.Session, client.AttachOptions{From: &end, Screen: proto.ScreenNever})
		if err != nil {
			return fmt.Errorf("send to %s: %w", s.Session, err)
		}
		if _, err := ch.Write(in); err != nil {
			return fmt.Errorf("send to %s: %w", s.Session, err)
		}
		return ch.Detach(ctx)
	})
}

// keyNames are the named keys of send, as xterm encodes them in its default modes.
var keyNames = map[string]string{
	"Enter": "\r", "Tab": "\t", "BTab": "\x1b[Z", "Space": " ", "BSpace": "\x7f", "Escape": "\x1b",
	"Home": "\x1b[H", "End": "\x1b[F", "IC": "\x1b[2~", "DC": "\x1b[3~", "PPage": "\x1b[5~", "NPage": "\x1b[6~",
	"F1": "\x1bOP", "F2": "\x1bOQ", "F3": "\x1bOR", "F4": "\x1bOS", "F5": "\x1b[15~", "F6": "\x1b[17~",
	"F7": "\x1b[18~", "F8": "\x1b[19~", "F9": "\x1b[20~", "F10": "\x1b[21~", "F11": "\x1b[23~", "F12": "\x1b[24~",
}

// arrows are the cursor keys' final bytes: CSI A in normal mode, SS3 A under application
// cursor keys (DECCKM).
var arrows = map[string]byte{"Up": 'A', "Down": 'B', "Right": 'C', "Left": 'D'}

// encodeKeys turns one argument of send into bytes: a key name, C-x or M-x, or text.
func encodeKeys(arg string, literal bool, m proto.ScreenModes) []byte {
	if literal {
		return []byte(arg)
	}
	if f, ok := arrows[arg]; ok {
		if m.AppCursor {
			return []byte{0x1b, 'O', f}
		}
		return []byte{0x1b, '[', f}
	}
	if k, ok := keyNames[arg]; ok {
		if m.AppCursor && (arg == "Home" || arg == "End") {
			return []byte{0x1b, 'O', k[2]}
		}
		return []byte(k)
	}
	if rest, ok := strings.CutPrefix(arg, "M-"); ok && rest != "" {
		return append([]byte{0x1b}, encodeKeys(rest, false, m)...)
	}
	if rest, ok := strings.CutPrefix(arg, "C-"); ok && len(rest) == 1 {
		c := rest[0]
		switch {
		case c >= 'a' && c <= 'z':
			return []byte{c - 'a' + 1}
		case c >= '@' && c <= '_':
			return []byte{c - '@'}
		case c == '?':
			return []byte{0x7f}
		}
	}
	return []byte(arg)
}
