package proto

// The results of the protocol's methods, as the server sends them and the client decodes them
// (protocol.md §4): one definition of the wire format for both sides.

// InitializeResult is the server's answer to initialize.
type InitializeResult struct {
	Server       ServerInfo         `json:"server"`
	Protocol     string             `json:"protocol"`
	Limits       Limits             `json:"limits"`
	Flow         Flow               `json:"flow"`
	Capabilities ServerCapabilities `json:"capabilities"`
}

// ServerCapabilities are the features of the gateway that a client may rely on: Screen, that
// sessions keep screens (session.attach's screen, session.capture).
type ServerCapabilities struct {
	Screen bool `json:"screen"`
	// Pipes: sessions may run on pipes (session.open's tty false, session.closeStdin).
	Pipes bool `json:"pipes"`
}

// CapabilityPipes is the client capability (initialize's capabilities.pipes: true) with which a
// pipe session's stderr reaches the client in stderr frames (FrameStderr); without it, stderr's
// bytes come in output frames, at the same offsets.
const CapabilityPipes = "pipes"

// CapabilityScreen is the client capability (initialize's capabilities.screen: true) that makes
// session.attach's screen default to "auto" for that socket; without it the default is "never".
const CapabilityScreen = "screen"

// ServerInfo names the server in InitializeResult.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Flow is the credit flow control a server applies (protocol.md §3).
type Flow struct {
	Window   int `json:"window"`
	AckBytes int `json:"ackBytes"`
	// ResumeHoldMs is how long after a socket ends its read-write sessions still hold their
	// output at the offset each channel's client acknowledged (protocol.md §3, resume hold).
	ResumeHoldMs int64 `json:"resumeHoldMs"`
}

// ExitInfo is a process's exit as the protocol reports it.
type ExitInfo struct {
	Code   int     `json:"code"`
	Signal *string `json:"signal"`
}

// OpenResult is session.open's result. Live is always 0: a new session has no replay.
type OpenResult struct {
	Session string `json:"session"`
	Channel uint32 `json:"channel"`
	Pid     int    `json:"pid"`
	Offset  int64  `json:"offset"`
	Live    int64  `json:"live"`
}

// AttachResult is session.attach's result. Output below offset Live is the replay: printed
// before the attach; a client never sends its terminal's automatic replies to it (protocol.md
// §3, replay and live output).
type AttachResult struct {
	Session string    `json:"session"`
	Channel uint32    `json:"channel"`
	Offset  int64     `json:"offset"`
	Live    int64     `json:"live"`
	Lost    int64     `json:"lost"`
	End     int64     `json:"end"`
	Pid     int       `json:"pid"`
	Cols    int       `json:"cols"`
	Rows    int       `json:"rows"`
	Exit    *ExitInfo `json:"exit"`
	// Screen is the length of the paint of the screen sent on the channel before the byte at
	// Offset (0: none); ScreenLost the output bytes the screen never read.
	Screen     int   `json:"screen"`
	ScreenLost int64 `json:"screenLost,omitempty"`
	// ScreenCols×ScreenRows is the size the paint is drawn for, when there is one (a size
	// applied after it, as this attach's own, comes as Cols×Rows).
	ScreenCols int `json:"screenCols,omitempty"`
	ScreenRows int `json:"screenRows,omitempty"`
	// TTY is false for a session on pipes (absent for a PTY session).
	TTY *bool `json:"tty,omitempty"`
}

// CaptureResult is session.capture's result: the screen as of output offset Offset, Cols×Rows,
// as text or as a paint (Format), and the output bytes the screen never read (Lost).
type CaptureResult struct {
	Session string `json:"session"`
	Offset  int64  `json:"offset"`
	Cols    int    `json:"cols"`
	Rows    int    `json:"rows"`
	Format  string `json:"format"`
	Lost    int64  `json:"lost"`
	Screen  string `json:"screen"`
	// Modes are the terminal modes the program set, which decide how keys are encoded for it
	// (muxterm send: Up is ESC O A under application cursor keys).
	Modes ScreenModes `json:"modes"`
}

// ScreenModes are a screen's modes, as session.capture reports them. Mouse is the tracking
// mode the program asked for (0 none, 9, 1000, 1002, 1003), MouseEncoding its encoding (0,
// 1005, 1006, 1015).
type ScreenModes struct {
	AltScreen      bool `json:"altScreen"`
	AppCursor      bool `json:"appCursor"`
	AppKeypad      bool `json:"appKeypad"`
	BracketedPaste bool `json:"bracketedPaste"`
	Mouse          int  `json:"mouse"`
	MouseEncoding  int  `json:"mouseEncoding"`
	FocusReporting bool `json:"focusReporting"`
	CursorVisible  bool `json:"cursorVisible"`
}

// KillResult is session.kill's result.
type KillResult struct {
	Session    string    `json:"session"`
	Status     string    `json:"status"`
	Exit       *ExitInfo `json:"exit"`
	DurationMs float64   `json:"duration_ms"`
	Signals    []string  `json:"signals"`
	Groups     int       `json:"groups"`
	Escapees   int       `json:"escapees"`
	Survivors  int       `json:"survivors"`
	Unverified int       `json:"unverified"`
	Offset     int64     `json:"offset"`
}

// SessionInfo is one entry of session.list.
type SessionInfo struct {
	Session string    `json:"session"`
	Name    string    `json:"name"`
	Pid     int       `json:"pid"`
	Cmd     []string  `json:"cmd"`
	Created string    `json:"created"`
	Cols    int       `json:"cols"`
	Rows    int       `json:"rows"`
	Viewers int       `json:"viewers"`
	End     int64     `json:"end"`
	Exit    *ExitInfo `json:"exit"`
	// Node names the gateway node that owns the session, in a cluster (absent on one node). A
	// session of another node carries only what the cluster's directory holds: session, name,
	// created, node; the rest is zero.
	Node string `json:"node,omitempty"`
	// TTY is false for a session on pipes (absent for a PTY session).
	TTY *bool `json:"tty,omitempty"`
}

// DetachResult is session.detach's result.
type DetachResult struct {
	Session string `json:"session"`
	Channel uint32 `json:"channel"`
}

// ResizeResult is session.resize's result: the size applied.
type ResizeResult struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// LeaseResult is session.lease's result.
type LeaseResult struct {
	Session string `json:"session"`
	Until   string `json:"until"` // RFC 3339
}

// ListResult is session.list's result.
type ListResult struct {
	Sessions []SessionInfo `json:"sessions"`
}
