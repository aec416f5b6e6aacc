package proto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Decoding rules shared by every Decode function:
//   - params must be a JSON object; absent or null params are an empty object.
//   - Member names match exactly (no case folding, unlike encoding/json), a
//     repeated member is refused, and unknown members are ignored.
//   - A member that is null counts as absent.
//   - Integers are checked on the JSON literal itself (integral value, range)
//     before any conversion, so "80", 1.5, 1e999 and 4294967296 never reach a
//     narrower type. An integral literal such as 80.0 or 8e1 is accepted.
//   - params._meta is best-effort: traceparent/tracestate are kept when they
//     are strings, and anything malformed there is ignored, never refused.
//   - The first problem found is returned as one *Error (invalid_params with
//     data.param, or unknown_session for a malformed session id); the params
//     returned alongside it are partial and must not be used.
//   - Decode functions return *Error, not error: never store a nil *Error in
//     an error variable.

// ParseRequest parses one text message as a JSON-RPC 2.0 request. It refuses
// non-JSON (parse_error); and arrays (batches), other non-objects, a repeated
// member, jsonrpc other than "2.0", a missing, empty or non-string method, an
// id that is not a number or a string, and params that are neither object nor
// array (invalid_request). A message without id parses as a notification; the
// caller decides what to do with it. It never panics, whatever b holds.
//
// On error the *Request is nil, unless a valid id was read before the problem
// was found: then it holds only that ID, so the caller can answer with it.
// Otherwise the caller answers with id null. The result never aliases b.
func ParseRequest(b []byte) (*Request, *Error) {
	if !json.Valid(b) {
		return nil, ErrParse("message is not valid JSON")
	}
	b = bytes.TrimLeft(b, " \t\r\n")
	switch b[0] { // json.Valid: b holds at least one value
	case '{':
	case '[':
		return nil, ErrInvalidRequest("batches are not supported")
	default:
		return nil, ErrInvalidRequest("a request must be a JSON object")
	}
	m, dup, err := objectMembers(b)
	if err != nil {
		return nil, ErrParse("message is not valid JSON") // unreachable after json.Valid
	}
	if dup != "" {
		return nil, ErrInvalidRequest(fmt.Sprintf("member %q appears more than once", dup))
	}

	// The id comes first, so that later errors can be answered with it.
	var id json.RawMessage
	if raw, ok := m["id"]; ok {
		switch raw[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			id = raw
		default:
			return nil, ErrInvalidRequest("id must be a number or a string")
		}
	}
	fail := func(e *Error) (*Request, *Error) {
		if id == nil {
			return nil, e
		}
		return &Request{ID: id}, e
	}

	if v, ok := jsonString(m["jsonrpc"]); !ok || v != jsonrpcVersion {
		return fail(ErrInvalidRequest(`jsonrpc must be "2.0"`))
	}
	method, ok := jsonString(m["method"])
	if !ok || method == "" {
		return fail(ErrInvalidRequest("method must be a non-empty string"))
	}
	var params json.RawMessage
	if raw, ok := m["params"]; ok && !isJSONNull(raw) {
		if raw[0] != '{' && raw[0] != '[' {
			return fail(ErrInvalidRequest("params must be an object or an array"))
		}
		params = raw
	}
	return &Request{JSONRPC: jsonrpcVersion, ID: id, Method: method, Params: params}, nil
}

// Bounds of validated params (protocol.md §3, §4).
const (
	maxNameBytes  = 256
	maxLeaseTTLMs = 86_400_000 // 24 h
	sessionIDLen  = 32         // lowercase hex digits: 128 random bits
	// maxWinsizeDim bounds cols and rows whatever Limits says, because the PTY
	// takes them as uint16 (struct winsize).
	maxWinsizeDim = math.MaxUint16
)

// DecodeInitialize decodes and validates the params of initialize. All members
// are optional; client must be an object whose name and version are strings,
// and capabilities an object.
func DecodeInitialize(raw json.RawMessage) (InitializeParams, *Error) {
	var p InitializeParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if c, ok := m["client"]; ok && !isJSONNull(c) {
		cm, dup, err := objectMembers(c)
		if err != nil || dup != "" {
			return p, ErrInvalidParams("client", "client must be an object with string members name and version")
		}
		if p.Client.Name, e = optionalString(cm, "name", "client.name"); e != nil {
			return p, e
		}
		if p.Client.Version, e = optionalString(cm, "version", "client.version"); e != nil {
			return p, e
		}
	}
	if c, ok := m["capabilities"]; ok && !isJSONNull(c) {
		if c[0] != '{' || json.Unmarshal(c, &p.Capabilities) != nil {
			return p, ErrInvalidParams("capabilities", "capabilities must be an object")
		}
	}
	return p, nil
}

// DecodeOpen decodes and validates the params of session.open: channel in
// 1..4294967295; tty absent or a boolean; cols and rows in 1..lim.MaxCols and
// 1..lim.MaxRows (with tty false both may be absent, or 0); cmd, if
// given, a non-empty array of strings without NUL whose first element is not
// empty; cwd without NUL; env names matching [A-Za-z_][A-Za-z0-9_]*, not
// LD_*, BASH_ENV, ENV or IFS, with string values without NUL; name at most
// 256 bytes. Whether cmd may run and cwd exists is for the caller to check.
func DecodeOpen(raw json.RawMessage, lim Limits) (OpenParams, *Error) {
	var p OpenParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, e
	}
	if t, ok := m["tty"]; ok && !isJSONNull(t) {
		var tty bool
		if json.Unmarshal(t, &tty) != nil {
			return p, ErrInvalidParams("tty", "tty must be a boolean")
		}
		p.TTY = &tty
	}
	if !p.Pipes() || !zeroOrAbsent(m, "cols") || !zeroOrAbsent(m, "rows") {
		if p.Cols, p.Rows, e = requiredSize(m, lim); e != nil {
			return p, e
		}
	}
	if p.Cmd, e = decodeCmd(m); e != nil {
		return p, e
	}
	if p.Cwd, e = optionalString(m, "cwd", "cwd"); e != nil {
		return p, e
	}
	if strings.IndexByte(p.Cwd, 0) >= 0 {
		return p, ErrInvalidParams("cwd", "cwd must not contain NUL")
	}
	if p.Env, e = decodeEnv(m); e != nil {
		return p, e
	}
	if p.Name, e = optionalString(m, "name", "name"); e != nil {
		return p, e
	}
	if len(p.Name) > maxNameBytes {
		return p, ErrInvalidParams("name", fmt.Sprintf("name must be at most %d bytes", maxNameBytes))
	}
	if p.Record, e = optionalBool(m, "record"); e != nil {
		return p, e
	}
	return p, nil
}

// zeroOrAbsent reports whether member name is absent, null or the number 0.
func zeroOrAbsent(m map[string]json.RawMessage, name string) bool {
	v, ok := m[name]
	return !ok || isJSONNull(v) || string(v) == "0"
}

// DecodeAttach decodes and validates the params of session.attach: channel
// in 1..4294967295, session a well-formed id (anything else is
// unknown_session, as for an id that does not exist), from absent or >= 0,
// cols and rows both absent or both within the limits as for session.open.
// Whether from lies beyond the session's end is for the caller to check.
func DecodeAttach(raw json.RawMessage, lim Limits) (AttachParams, *Error) {
	var p AttachParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, e
	}
	if p.Session, e = requiredSessionID(m); e != nil {
		return p, e
	}
	from, present, e := intMember(m, "from", 0, math.MaxInt64)
	if e != nil {
		return p, e
	}
	if present {
		p.From = &from
	}
	if p.Screen, e = optionalString(m, "screen", "screen"); e != nil {
		return p, e
	}
	switch p.Screen {
	case "", ScreenAuto, ScreenAlways, ScreenNever:
	default:
		return p, ErrInvalidParams("screen", `screen must be "auto", "always" or "never"`)
	}
	_, hasCols := m["cols"]
	_, hasRows := m["rows"]
	if hasCols || hasRows {
		if p.Cols, p.Rows, e = requiredSize(m, lim); e != nil {
			return p, e
		}
	}
	return p, nil
}

// DecodeDetach decodes and validates the params of session.detach.
func DecodeDetach(raw json.RawMessage) (DetachParams, *Error) {
	var p DetachParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if raw, ok := m["hold"]; ok && !isJSONNull(raw) {
		switch string(raw) {
		case "true":
			p.Hold = true
		case "false":
		default:
			return p, ErrInvalidParams("hold", "hold must be a boolean")
		}
	}
	p.Channel, e = requiredChannel(m)
	return p, e
}

// DecodeResize decodes and validates the params of session.resize: channel
// in 1..4294967295, cols in 1..lim.MaxCols and rows in 1..lim.MaxRows, and
// never above 65535 whatever lim says. Anything else is invalid_params, and
// the returned sizes then mean nothing.
func DecodeResize(raw json.RawMessage, lim Limits) (ResizeParams, *Error) {
	var p ResizeParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, e
	}
	p.Cols, p.Rows, e = requiredSize(m, lim)
	return p, e
}

// DecodeSignal decodes and validates the params of session.signal and
// returns the signal's name from Signals: the param is one of them, optionally
// prefixed with SIG, in upper case.
func DecodeSignal(raw json.RawMessage) (SignalParams, string, *Error) {
	var p SignalParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, "", e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, "", e
	}
	s, present, e := stringMember(m, "signal", "signal")
	if e != nil {
		return p, "", e
	}
	name := strings.TrimPrefix(s, "SIG")
	if !present || !slices.Contains(Signals, name) {
		return p, "", ErrInvalidParams("signal", "signal must be one of "+strings.Join(Signals, ", "))
	}
	p.Signal = s
	return p, name, nil
}

// DecodeKill decodes and validates the params of session.kill.
func DecodeKill(raw json.RawMessage) (KillParams, *Error) {
	var p KillParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	p.Session, e = requiredSessionID(m)
	return p, e
}

// DecodeLease decodes and validates the params of session.lease: session a
// well-formed id, ttl_ms required in 0..86400000 (0 ends the lease).
func DecodeLease(raw json.RawMessage) (LeaseParams, *Error) {
	var p LeaseParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Session, e = requiredSessionID(m); e != nil {
		return p, e
	}
	p.TTLMs, e = requiredInt(m, "ttl_ms", 0, maxLeaseTTLMs)
	return p, e
}

// DecodeCapture decodes and validates the params of session.capture: session a well-formed
// id, format absent, "text" or "ansi", scrollback absent or in 0..MaxCaptureScrollback.
func DecodeCapture(raw json.RawMessage) (CaptureParams, *Error) {
	var p CaptureParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Session, e = requiredSessionID(m); e != nil {
		return p, e
	}
	if p.Format, e = optionalString(m, "format", "format"); e != nil {
		return p, e
	}
	switch p.Format {
	case "":
		p.Format = CaptureText
	case CaptureText, CaptureANSI:
	default:
		return p, ErrInvalidParams("format", `format must be "text" or "ansi"`)
	}
	n, _, e := intMember(m, "scrollback", 0, MaxCaptureScrollback)
	p.Scrollback = int(n)
	return p, e
}

// DecodeList decodes the params of session.list, which has none but _meta.
func DecodeList(raw json.RawMessage) (ListParams, *Error) {
	m, e := paramsObject(raw)
	if e != nil {
		return ListParams{}, e
	}
	return ListParams{Meta: decodeMeta(m)}, nil
}

// paramsObject returns the members of params; absent or null params are an
// empty object.
func paramsObject(raw json.RawMessage) (map[string]json.RawMessage, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isJSONNull(raw) {
		return map[string]json.RawMessage{}, nil
	}
	m, dup, err := objectMembers(raw)
	if err != nil {
		return nil, ErrInvalidParams("params", "params must be a JSON object")
	}
	if dup != "" {
		return nil, ErrInvalidParams(dup, fmt.Sprintf("%s appears more than once", dup))
	}
	return m, nil
}

// decodeMeta keeps params._meta.traceparent and tracestate when they are
// strings. It never fails: tracing must not break a request.
func decodeMeta(m map[string]json.RawMessage) *Meta {
	raw, ok := m["_meta"]
	if !ok {
		return nil
	}
	mm, dup, err := objectMembers(raw)
	if err != nil || dup != "" {
		return nil
	}
	var meta Meta
	meta.Traceparent, _ = jsonString(mm["traceparent"])
	meta.Tracestate, _ = jsonString(mm["tracestate"])
	if meta == (Meta{}) {
		return nil
	}
	return &meta
}

func requiredChannel(m map[string]json.RawMessage) (uint32, *Error) {
	v, e := requiredInt(m, "channel", 1, math.MaxUint32)
	if e != nil {
		return 0, e
	}
	return uint32(v), nil // 1..MaxUint32: checked above
}

// requiredSize returns cols and rows, each in 1..its limit and never above
// maxWinsizeDim, so the caller may convert them to uint16.
func requiredSize(m map[string]json.RawMessage, lim Limits) (cols, rows int, e *Error) {
	c, e := requiredInt(m, "cols", 1, int64(min(lim.MaxCols, maxWinsizeDim)))
	if e != nil {
		return 0, 0, e
	}
	r, e := requiredInt(m, "rows", 1, int64(min(lim.MaxRows, maxWinsizeDim)))
	if e != nil {
		return 0, 0, e
	}
	return int(c), int(r), nil
}

// requiredSessionID returns member "session", which must be a string. A string
// that is not a well-formed id is unknown_session, like an id that does not
// exist.
func requiredSessionID(m map[string]json.RawMessage) (string, *Error) {
	s, present, e := stringMember(m, "session", "session")
	if e != nil {
		return "", e
	}
	if !present {
		return "", ErrInvalidParams("session", "session is required: a session id")
	}
	if !wellFormedSessionID(s) {
		return "", ErrUnknownSession(s)
	}
	return s, nil
}

// wellFormedSessionID reports whether s is 32 lowercase hex digits.
func wellFormedSessionID(s string) bool {
	if len(s) != sessionIDLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// decodeCmd returns member "cmd": absent, or a non-empty array of strings
// without NUL whose first element, the program, is not empty.
func decodeCmd(m map[string]json.RawMessage) ([]string, *Error) {
	raw, ok := m["cmd"]
	if !ok || isJSONNull(raw) {
		return nil, nil
	}
	// Elements are decoded one by one: unmarshaling into []string would
	// silently turn a null element into "".
	var elems []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return nil, ErrInvalidParams("cmd", "cmd must be an array of strings")
	}
	cmd := make([]string, len(elems))
	for i, el := range elems {
		a, ok := jsonString(el)
		if !ok {
			return nil, ErrInvalidParams("cmd", "cmd must be an array of strings")
		}
		if strings.IndexByte(a, 0) >= 0 {
			return nil, ErrInvalidParams("cmd", "cmd must not contain NUL")
		}
		cmd[i] = a
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return nil, ErrInvalidParams("cmd", "cmd must name a program: cmd[0] must not be empty")
	}
	return cmd, nil
}

// decodeEnv returns member "env": absent, or an object of string values
// without NUL whose names pass envNameAllowed.
func decodeEnv(m map[string]json.RawMessage) (map[string]string, *Error) {
	raw, ok := m["env"]
	if !ok || isJSONNull(raw) {
		return nil, nil
	}
	members, dup, err := objectMembers(raw)
	if err != nil {
		return nil, ErrInvalidParams("env", "env must be an object of strings")
	}
	if dup != "" {
		return nil, ErrInvalidParams("env", fmt.Sprintf("env variable %q appears more than once", dup))
	}
	env := make(map[string]string, len(members))
	for name, v := range members {
		if msg := envNameProblem(name); msg != "" {
			return nil, ErrInvalidParams("env", msg)
		}
		s, ok := jsonString(v)
		if !ok {
			return nil, ErrInvalidParams("env", fmt.Sprintf("env variable %s must be a string", name))
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, ErrInvalidParams("env", fmt.Sprintf("env variable %s must not contain NUL", name))
		}
		env[name] = s
	}
	return env, nil
}

// envNameProblem returns why name may not be set in a child's environment, or
// "" if it may: it must match [A-Za-z_][A-Za-z0-9_]* and must not be one the
// dynamic loader or the shell runs code from (LD_*, BASH_ENV, ENV, IFS).
func envNameProblem(name string) string {
	if name == "" {
		return "env variable names must not be empty"
	}
	for i := range len(name) {
		c := name[i]
		letter := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Sprintf("env variable name %q must match [A-Za-z_][A-Za-z0-9_]*", name)
		}
	}
	if strings.HasPrefix(name, "LD_") || name == "BASH_ENV" || name == "ENV" || name == "IFS" {
		return fmt.Sprintf("env variable %s is refused", name)
	}
	return ""
}
