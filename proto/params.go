package proto

// Meta is params._meta: W3C Trace Context carried by a request. It is
// otherwise ignored.
type Meta struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// Limits are the server's limits as announced in the initialize result.
// DecodeOpen and DecodeResize read MaxCols and MaxRows; a limit <= 0 accepts
// no value at all.
type Limits struct {
	MaxMessageBytes     int `json:"maxMessageBytes"`
	MaxInputBytes       int `json:"maxInputBytes"`
	MaxChannels         int `json:"maxChannels"`
	MaxSessions         int `json:"maxSessions"`
	MaxCols             int `json:"maxCols"`
	MaxRows             int `json:"maxRows"`
	MaxOutputFrameBytes int `json:"maxOutputFrameBytes"`
	// Rate limits (protocol.md §4, initialize); absent (zero) means unlimited. InputRate and
	// InputBurst are input payload bytes per second per session and the bucket size;
	// OpenRate and OpenBurst are session.open calls per second per principal and the bucket
	// size.
	InputRate  int     `json:"inputRate,omitempty"`
	InputBurst int     `json:"inputBurst,omitempty"`
	OpenRate   float64 `json:"openRate,omitempty"`
	OpenBurst  int     `json:"openBurst,omitempty"`
	// PendingRequests bounds session.open and session.kill calls in flight per socket
	// (limit_exceeded "pendingRequests"); MaxUnreadResponses the responses and notifications a
	// client may leave unread before the socket closes with 1008; InputQueueBytes the input a
	// session queues for a program that is not reading (limit_exceeded "inputQueue");
	// MaxWireMessageBytes the message beyond which the socket closes with 1009; MaxSockets the
	// sockets one principal may hold (429 on the upgrade beyond). Each is absent (zero) when
	// the server does not say; muxterm's gateway says them all.
	PendingRequests     int `json:"pendingRequests,omitempty"`
	MaxUnreadResponses  int `json:"maxUnreadResponses,omitempty"`
	InputQueueBytes     int `json:"inputQueueBytes,omitempty"`
	MaxWireMessageBytes int `json:"maxWireMessageBytes,omitempty"`
	MaxSockets          int `json:"maxSockets,omitempty"`
}

// ClientInfo names the client in initialize params.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// InitializeParams are the params of initialize. Every member is optional.
type InitializeParams struct {
	Client       ClientInfo     `json:"client"`
	Capabilities map[string]any `json:"capabilities,omitempty"`
	Meta         *Meta          `json:"_meta,omitempty"`
}

// OpenParams are the params of session.open. Channel, Cols and Rows are
// required; the rest are optional (zero means the default of protocol.md).
type OpenParams struct {
	Channel uint32            `json:"channel"`
	Cmd     []string          `json:"cmd,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cols    int               `json:"cols"`
	Rows    int               `json:"rows"`
	Name    string            `json:"name,omitempty"`
	// Record asks for a recording of the session, where the gateway records on request.
	Record bool `json:"record,omitempty"`
	// TTY false runs the program on pipes (stdin, stdout, stderr), without a terminal; nil or
	// true on a PTY. Cols and Rows are optional with TTY false.
	TTY  *bool `json:"tty,omitempty"`
	Meta *Meta `json:"_meta,omitempty"`
}

// Pipes reports whether the params ask for a session on pipes (tty false).
func (p OpenParams) Pipes() bool { return p.TTY != nil && !*p.TTY }

// AttachParams are the params of session.attach. From is nil when absent
// (replay from the oldest retained byte). Cols and Rows are the attaching
// viewer's terminal size, both 0 when it declares none.
type AttachParams struct {
	Channel uint32 `json:"channel"`
	Session string `json:"session"`
	From    *int64 `json:"from,omitempty"`
	Cols    int    `json:"cols,omitempty"`
	Rows    int    `json:"rows,omitempty"`
	// Screen is ScreenAuto, ScreenAlways, ScreenNever, or "" (absent: ScreenAuto for a client
	// that declared CapabilityScreen, else ScreenNever): whether the attach starts with a paint
	// of the session's screen (protocol.md §4 session.attach).
	Screen string `json:"screen,omitempty"`
	Meta   *Meta  `json:"_meta,omitempty"`
}

// The values of session.attach's screen.
const (
	ScreenAuto   = "auto"
	ScreenAlways = "always"
	ScreenNever  = "never"
)

// CaptureParams are the params of session.capture. Format is CaptureText or CaptureANSI;
// Scrollback the lines of history above the screen to include.
type CaptureParams struct {
	Session    string `json:"session"`
	Format     string `json:"format,omitempty"`
	Scrollback int    `json:"scrollback,omitempty"`
	Meta       *Meta  `json:"_meta,omitempty"`
}

// The values of session.capture's format.
const (
	CaptureText = "text"
	CaptureANSI = "ansi"
)

// MaxCaptureScrollback bounds session.capture's scrollback.
const MaxCaptureScrollback = 100000

// MaxCaptureBytes bounds session.capture's answer (its JSON message): a larger one is refused
// with limit_exceeded "captureBytes".
const MaxCaptureBytes = 8 << 20

// DetachParams are the params of session.detach.
type DetachParams struct {
	Channel uint32 `json:"channel"`
	// Hold detaches as a dropped socket does: the session holds its output for a resume
	// (--resume-hold). A relay that shares its socket with other channels detaches so when its
	// own client's socket dropped.
	Hold bool  `json:"hold,omitempty"`
	Meta *Meta `json:"_meta,omitempty"`
}

// CloseStdinParams are the params of session.closeStdin: the channel bound to a pipe session.
type CloseStdinParams = DetachParams

// ResizeParams are the params of session.resize.
type ResizeParams struct {
	Channel uint32 `json:"channel"`
	Cols    int    `json:"cols"`
	Rows    int    `json:"rows"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// SignalParams are the params of session.signal. Signal is the name as sent.
type SignalParams struct {
	Channel uint32 `json:"channel"`
	Signal  string `json:"signal"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// KillParams are the params of session.kill.
type KillParams struct {
	Session string `json:"session"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// LeaseParams are the params of session.lease. TTLMs 0 ends the lease.
type LeaseParams struct {
	Session string `json:"session"`
	TTLMs   int64  `json:"ttl_ms"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// ListParams are the params of session.list.
type ListParams struct {
	Meta *Meta `json:"_meta,omitempty"`
}

// Signals are the signal names session.signal accepts, without the optional SIG prefix, in
// upper case (protocol.md §4). The server maps each to its own platform's signal.
var Signals = []string{"INT", "QUIT", "TERM", "HUP", "KILL", "TSTP", "CONT", "USR1", "USR2", "WINCH"}
