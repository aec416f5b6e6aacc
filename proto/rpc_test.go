package proto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/muxterm/muxterm/internal/testutil"
)

// rpcTestLimits are the limits of protocol.md's initialize example.
var rpcTestLimits = Limits{
	MaxMessageBytes: 65536, MaxInputBytes: 65536, MaxChannels: 64, MaxSessions: 64,
	MaxCols: 1000, MaxRows: 1000, MaxOutputFrameBytes: 32768,
}

const rpcTestSession = "9f0c1a2b3c4d5e6f708192a3b4c5d6e1"

// protocolRequests are the requests of protocol.md §4 (ids made well-formed
// where the document elides them) plus one of each method it describes.
var protocolRequests = []string{
	`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"client":{"name":"my-plugin","version":"0.3"},"capabilities":{}}}`,
	`{"jsonrpc":"2.0","id":2,"method":"session.open","params":{"channel":1,"cols":80,"rows":24}}`,
	`{"jsonrpc":"2.0","id":3,"method":"session.attach","params":{"channel":2,"session":"9f0c…e1","from":1024}}`,
	`{"jsonrpc":"2.0","id":3,"method":"session.attach","params":{"channel":2,"session":"` + rpcTestSession + `","from":1024}}`,
	`{"jsonrpc":"2.0","id":4,"method":"session.detach","params":{"channel":2}}`,
	`{"jsonrpc":"2.0","id":5,"method":"session.resize","params":{"channel":1,"cols":120,"rows":40}}`,
	`{"jsonrpc":"2.0","id":6,"method":"session.signal","params":{"channel":1,"signal":"INT"}}`,
	`{"jsonrpc":"2.0","id":7,"method":"session.kill","params":{"session":"` + rpcTestSession + `"}}`,
	`{"jsonrpc":"2.0","id":8,"method":"session.list","params":{}}`,
	`{"jsonrpc":"2.0","id":"l-9","method":"session.lease","params":{"session":"` + rpcTestSession + `","ttl_ms":60000}}`,
	`{"jsonrpc":"2.0","id":10,"method":"session.open","params":{"channel":3,"cmd":["bash","-l"],"cwd":"/tmp","env":{"FOO":"bar"},"cols":80,"rows":24,"name":"build","_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}`,
}

// wantRPCError fails t unless e is an error of kind with the code protocol.md
// gives that kind and, if param is not "", data.param == param.
func wantRPCError(t *testing.T, e *Error, kind, param string) {
	t.Helper()
	if e == nil {
		t.Fatalf("error = nil, want %s", kind)
	}
	if got := e.Kind(); got != kind {
		t.Fatalf("error kind = %q (%v), want %q", got, e, kind)
	}
	if got, want := e.Code, rpcKindCodes[kind]; got != want {
		t.Fatalf("error code = %v, want %v", got, want)
	}
	if param != "" {
		if got := e.Data["param"]; got != param {
			t.Fatalf("data.param = %v (%v), want %v", got, e, param)
		}
	}
}

// rpcKindCodes is protocol.md §5's table.
var rpcKindCodes = map[string]int{
	"parse_error": -32700, "invalid_request": -32600, "method_not_found": -32601,
	"invalid_params": -32602, "internal": -32603, "unknown_session": -32001,
	"channel_in_use": -32002, "limit_exceeded": -32003, "session_closed": -32004,
	"unknown_channel": -32005, "bad_frame": -32006, "forbidden": -32007, "spawn_failed": -32008,
}

func TestErrorConstructors(t *testing.T) {
	tests := []struct {
		err      *Error
		kind     string
		wantData map[string]any
	}{
		{ErrParse("x"), "parse_error", nil},
		{ErrInvalidRequest("x"), "invalid_request", nil},
		{ErrMethodNotFound("session.nope"), "method_not_found", map[string]any{"method": "session.nope"}},
		{ErrInvalidParams("cols", "x"), "invalid_params", map[string]any{"param": "cols"}},
		{ErrInternal("x"), "internal", nil},
		{ErrUnknownSession("abc"), "unknown_session", map[string]any{"session": "abc"}},
		{ErrChannelInUse(7), "channel_in_use", map[string]any{"channel": uint32(7)}},
		{ErrLimitExceeded("maxChannels", "x"), "limit_exceeded", map[string]any{"limit": "maxChannels"}},
		{ErrSessionClosed("abc", "killed"), "session_closed", map[string]any{"session": "abc", "reason": "killed"}},
		{ErrUnknownChannel(9), "unknown_channel", map[string]any{"channel": uint32(9)}},
		{ErrBadFrame("x"), "bad_frame", nil},
		{ErrForbidden("x"), "forbidden", nil},
		{ErrSpawnFailed("no such file"), "spawn_failed", map[string]any{"reason": "no such file"}},
	}
	if got, want := len(tests), len(rpcKindCodes); got != want {
		t.Fatalf("%v constructors tested, want %v (one per kind)", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			wantRPCError(t, tt.err, tt.kind, "")
			want := map[string]any{"kind": tt.kind}
			for k, v := range tt.wantData {
				want[k] = v
			}
			if !reflect.DeepEqual(tt.err.Data, want) {
				t.Errorf("data = %v, want %v", tt.err.Data, want)
			}
			if tt.err.Message == "" {
				t.Errorf("message is empty, want text for people")
			}
			var asErr error = tt.err
			if !strings.Contains(asErr.Error(), tt.kind) {
				t.Errorf("Error() = %q, want it to name %q", asErr.Error(), tt.kind)
			}
			// On the wire: {"code":..,"message":..,"data":{"kind":..}}.
			var wire struct {
				Code int            `json:"code"`
				Data map[string]any `json:"data"`
			}
			b, err := json.Marshal(tt.err)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &wire); err != nil {
				t.Fatal(err)
			}
			if wire.Code != rpcKindCodes[tt.kind] || wire.Data["kind"] != tt.kind {
				t.Errorf("wire form %s, want code %v and data.kind %q", b, rpcKindCodes[tt.kind], tt.kind)
			}
		})
	}
}

func TestErrorWithoutKind(t *testing.T) {
	e := &Error{Code: -1, Message: "m"}
	if got, want := e.Kind(), ""; got != want {
		t.Errorf("Kind() = %q, want %q", got, want)
	}
	if got, want := e.Error(), "jsonrpc error -1: m"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestErrorChannel: Channel reads data.channel as the server sets it and as a client decodes it
// from the wire, and names no channel for an error without one or with a value that is not a
// channel number.
func TestErrorChannel(t *testing.T) {
	var decoded Error
	if err := json.Unmarshal(MarshalResponse(nil, nil, ErrUnknownChannel(7)), &struct {
		Error *Error `json:"error"`
	}{&decoded}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		e    *Error
		ch   uint32
		ok   bool
	}{
		{"built by the server", ErrChannelInUse(3), 3, true},
		{"decoded from the wire", &decoded, 7, true},
		{"the largest channel", &Error{Data: map[string]any{"channel": float64(math.MaxUint32)}}, math.MaxUint32, true},
		{"no data", &Error{Code: -1}, 0, false},
		{"no channel", ErrUnknownSession("s"), 0, false},
		{"a string", &Error{Data: map[string]any{"channel": "3"}}, 0, false},
		{"a fraction", &Error{Data: map[string]any{"channel": 3.5}}, 0, false},
		{"negative", &Error{Data: map[string]any{"channel": float64(-1)}}, 0, false},
		{"too large", &Error{Data: map[string]any{"channel": float64(math.MaxUint32 + 1)}}, 0, false},
	}
	for _, tt := range tests {
		if ch, ok := tt.e.Channel(); ch != tt.ch || ok != tt.ok {
			t.Errorf("%s: Channel() = %d, %v; want %d, %v", tt.name, ch, ok, tt.ch, tt.ok)
		}
	}
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantMethod string
		wantID     string // raw id; "" for none
		wantParams string // raw params; "" for none
		wantKind   string // "" for success
	}{
		{"initialize", protocolRequests[0], "initialize", "1", `{"client":{"name":"my-plugin","version":"0.3"},"capabilities":{}}`, ""},
		{"open", protocolRequests[1], "session.open", "2", `{"channel":1,"cols":80,"rows":24}`, ""},
		{"string id", `{"jsonrpc":"2.0","id":"a\"b","method":"m"}`, "m", `"a\"b"`, "", ""},
		{"negative fractional id", `{"jsonrpc":"2.0","id":-1.5e3,"method":"m"}`, "m", "-1.5e3", "", ""},
		{"member order free", `{"method":"m","params":{},"id":0,"jsonrpc":"2.0"}`, "m", "0", "{}", ""},
		{"whitespace", " \r\n\t{ \"jsonrpc\" : \"2.0\" , \"id\" : 1 , \"method\" : \"m\" } \n", "m", "1", "", ""},
		{"notification", `{"jsonrpc":"2.0","method":"m"}`, "m", "", "", ""},
		{"null params are no params", `{"jsonrpc":"2.0","id":1,"method":"m","params":null}`, "m", "1", "", ""},
		{"array params parse", `{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`, "m", "1", "[1]", ""},
		{"unknown member ignored", `{"jsonrpc":"2.0","id":1,"method":"m","x":{}}`, "m", "1", "", ""},
		{"escaped version", `{"jsonrpc":"2\u002e0","id":1,"method":"m"}`, "m", "1", "", ""},

		{"empty", ``, "", "", "", "parse_error"},
		{"space", `   `, "", "", "", "parse_error"},
		{"not json", `hello`, "", "", "", "parse_error"},
		{"truncated", `{"jsonrpc":"2.0","id":1,"method":"m"`, "", "", "", "parse_error"},
		{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"m"} x`, "", "", "", "parse_error"},
		{"two objects", `{"jsonrpc":"2.0","id":1,"method":"m"}{}`, "", "", "", "parse_error"},
		{"bad utf8 outside strings", "{\"jsonrpc\":\"2.0\",\xff}", "", "", "", "parse_error"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, "", "", "", "invalid_request"},
		{"empty batch", `[]`, "", "", "", "invalid_request"},
		{"number", `5`, "", "", "", "invalid_request"},
		{"string", `"x"`, "", "", "", "invalid_request"},
		{"null", `null`, "", "", "", "invalid_request"},
		{"empty object", `{}`, "", "", "", "invalid_request"},
		{"missing jsonrpc", `{"id":1,"method":"m"}`, "", "1", "", "invalid_request"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"m"}`, "", "1", "", "invalid_request"},
		{"jsonrpc number", `{"jsonrpc":2.0,"id":1,"method":"m"}`, "", "1", "", "invalid_request"},
		{"missing method", `{"jsonrpc":"2.0","id":1}`, "", "1", "", "invalid_request"},
		{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, "", "1", "", "invalid_request"},
		{"method number", `{"jsonrpc":"2.0","id":1,"method":1}`, "", "1", "", "invalid_request"},
		{"method null", `{"jsonrpc":"2.0","id":"x","method":null}`, "", `"x"`, "", "invalid_request"},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"m"}`, "", "", "", "invalid_request"},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"m"}`, "", "", "", "invalid_request"},
		{"array id", `{"jsonrpc":"2.0","id":[1],"method":"m"}`, "", "", "", "invalid_request"},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"m"}`, "", "", "", "invalid_request"},
		{"string params", `{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}`, "", "1", "", "invalid_request"},
		{"number params", `{"jsonrpc":"2.0","id":1,"method":"m","params":3}`, "", "1", "", "invalid_request"},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`, "", "", "", "invalid_request"},
		{"duplicate id", `{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`, "", "", "", "invalid_request"},
		{"case folded member is not method", `{"jsonrpc":"2.0","id":1,"METHOD":"m"}`, "", "1", "", "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, e := ParseRequest([]byte(tt.in))
			if tt.wantKind != "" {
				wantRPCError(t, e, tt.wantKind, "")
				switch {
				case tt.wantID == "" && req != nil:
					t.Errorf("request on error = %+v, want nil", req)
				case tt.wantID != "" && (req == nil || string(req.ID) != tt.wantID):
					t.Errorf("request on error = %+v, want one with id %s", req, tt.wantID)
				}
				return
			}
			if e != nil {
				t.Fatalf("ParseRequest error = %v, want nil", e)
			}
			if req.JSONRPC != "2.0" || req.Method != tt.wantMethod || string(req.ID) != tt.wantID || string(req.Params) != tt.wantParams {
				t.Errorf("ParseRequest = {%q %s %q %s}, want {\"2.0\" %s %q %s}",
					req.JSONRPC, req.ID, req.Method, req.Params, tt.wantID, tt.wantMethod, tt.wantParams)
			}
			if got, want := req.IsNotification(), tt.wantID == ""; got != want {
				t.Errorf("IsNotification() = %v, want %v", got, want)
			}
		})
	}
}

func TestParseRequestDoesNotAlias(t *testing.T) {
	in := []byte(`{"jsonrpc":"2.0","id":"ab","method":"m","params":{"x":1}}`)
	req, e := ParseRequest(in)
	if e != nil {
		t.Fatal(e)
	}
	for i := range in {
		in[i] = ' '
	}
	if string(req.ID) != `"ab"` || string(req.Params) != `{"x":1}` {
		t.Errorf("after overwriting the input, request = %s %s, want \"ab\" {\"x\":1}", req.ID, req.Params)
	}
}

func TestProtocolRequestsDecode(t *testing.T) {
	for _, in := range protocolRequests {
		req, e := ParseRequest([]byte(in))
		if e != nil {
			t.Fatalf("ParseRequest(%s) = %v, want nil", in, e)
		}
		e = decodeByMethod(req.Method, req.Params, rpcTestLimits)
		if strings.Contains(in, "…") { // protocol.md elides the session id
			wantRPCError(t, e, "unknown_session", "")
			continue
		}
		if e != nil {
			t.Errorf("decoding the params of %s = %v, want nil", in, e)
		}
	}
}

// decodeByMethod runs the Decode function of method, as the multiplexer
// would, and checks the invariants every accepted value must hold.
func decodeByMethod(method string, raw json.RawMessage, lim Limits) *Error {
	var e *Error
	switch method {
	case "initialize":
		_, e = DecodeInitialize(raw)
	case "session.open":
		var p OpenParams
		p, e = DecodeOpen(raw, lim)
		unsized := p.Pipes() && p.Cols == 0 && p.Rows == 0 // a pipe session's size is optional
		if e == nil && (p.Channel == 0 || !unsized && (p.Cols < 1 || p.Cols > min(lim.MaxCols, 65535) ||
			p.Rows < 1 || p.Rows > min(lim.MaxRows, 65535)) || len(p.Name) > 256 ||
			(p.Cmd != nil && (len(p.Cmd) == 0 || p.Cmd[0] == ""))) {
			panic(fmt.Sprintf("DecodeOpen accepted out-of-range params %+v", p))
		}
		for k := range p.Env {
			if envNameProblem(k) != "" {
				panic(fmt.Sprintf("DecodeOpen accepted env name %q", k))
			}
		}
	case "session.attach":
		var p AttachParams
		p, e = DecodeAttach(raw, lim)
		if e == nil && (p.Channel == 0 || !wellFormedSessionID(p.Session) || (p.From != nil && *p.From < 0) ||
			(p.Cols == 0) != (p.Rows == 0) || p.Cols < 0 || p.Cols > min(lim.MaxCols, 65535) ||
			p.Rows < 0 || p.Rows > min(lim.MaxRows, 65535)) {
			panic(fmt.Sprintf("DecodeAttach accepted out-of-range params %+v", p))
		}
	case "session.detach":
		var p DetachParams
		p, e = DecodeDetach(raw)
		if e == nil && p.Channel == 0 {
			panic("DecodeDetach accepted channel 0")
		}
	case "session.resize":
		var p ResizeParams
		p, e = DecodeResize(raw, lim)
		if e == nil && (p.Channel == 0 || p.Cols < 1 || p.Cols > min(lim.MaxCols, 65535) ||
			p.Rows < 1 || p.Rows > min(lim.MaxRows, 65535)) {
			panic(fmt.Sprintf("DecodeResize accepted out-of-range params %+v", p))
		}
	case "session.signal":
		var p SignalParams
		var sig string
		p, sig, e = DecodeSignal(raw)
		if e == nil && (p.Channel == 0 || sig == "") {
			panic(fmt.Sprintf("DecodeSignal accepted %+v as %v", p, sig))
		}
	case "session.kill":
		var p KillParams
		p, e = DecodeKill(raw)
		if e == nil && !wellFormedSessionID(p.Session) {
			panic(fmt.Sprintf("DecodeKill accepted %+v", p))
		}
	case "session.list":
		_, e = DecodeList(raw)
	case "session.lease":
		var p LeaseParams
		p, e = DecodeLease(raw)
		if e == nil && (!wellFormedSessionID(p.Session) || p.TTLMs < 0 || p.TTLMs > 86400000) {
			panic(fmt.Sprintf("DecodeLease accepted %+v", p))
		}
	default:
		return ErrMethodNotFound(method)
	}
	return e
}

func TestDecodeResize(t *testing.T) {
	tests := []struct {
		name      string
		params    string
		lim       Limits
		wantCols  int
		wantRows  int
		wantParam string // data.param of the invalid_params error; "" for success
	}{
		{"ok", `{"channel":1,"cols":80,"rows":24}`, rpcTestLimits, 80, 24, ""},
		{"minimum", `{"channel":1,"cols":1,"rows":1}`, rpcTestLimits, 1, 1, ""},
		{"maximum", `{"channel":4294967295,"cols":1000,"rows":1000}`, rpcTestLimits, 1000, 1000, ""},
		{"integral 80.0", `{"channel":1,"cols":80.0,"rows":24}`, rpcTestLimits, 80, 24, ""},
		{"integral 1e3", `{"channel":1,"cols":1e3,"rows":2.4e1}`, rpcTestLimits, 1000, 24, ""},
		{"integral 8000e-2", `{"channel":1,"cols":8000e-2,"rows":24}`, rpcTestLimits, 80, 24, ""},
		{"unknown member ignored", `{"channel":1,"cols":80,"rows":24,"x":[1,2]}`, rpcTestLimits, 80, 24, ""},
		{"meta kept", `{"channel":1,"cols":80,"rows":24,"_meta":{"traceparent":"t"}}`, rpcTestLimits, 80, 24, ""},
		{"bad meta ignored", `{"channel":1,"cols":80,"rows":24,"_meta":5}`, rpcTestLimits, 80, 24, ""},
		{"limits above uint16 are capped", `{"channel":1,"cols":65535,"rows":65535}`, Limits{MaxCols: 1 << 20, MaxRows: 1 << 20}, 65535, 65535, ""},

		{"cols 0", `{"channel":1,"cols":0,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"rows 0", `{"channel":1,"cols":80,"rows":0}`, rpcTestLimits, 0, 0, "rows"},
		{"cols over max", `{"channel":1,"cols":1001,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"rows over max", `{"channel":1,"cols":80,"rows":1001}`, rpcTestLimits, 0, 0, "rows"},
		{"cols negative", `{"channel":1,"cols":-80,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols -0", `{"channel":1,"cols":-0,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols fractional", `{"channel":1,"cols":1.5,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols fraction by exponent", `{"channel":1,"cols":805e-1,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols 1e4", `{"channel":1,"cols":1e4,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols string", `{"channel":1,"cols":"80","rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols bool", `{"channel":1,"cols":true,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols array", `{"channel":1,"cols":[80],"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols null", `{"channel":1,"cols":null,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols missing", `{"channel":1,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"rows missing", `{"channel":1,"cols":80}`, rpcTestLimits, 0, 0, "rows"},
		{"cols u16 wrap", `{"channel":1,"cols":65616,"rows":24}`, Limits{MaxCols: 1 << 20, MaxRows: 1000}, 0, 0, "cols"},
		{"cols u32 wrap", `{"channel":1,"cols":4294967376,"rows":24}`, Limits{MaxCols: math.MaxInt, MaxRows: 1000}, 0, 0, "cols"},
		{"cols beyond int64", `{"channel":1,"cols":18446744073709551696,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols huge exponent", `{"channel":1,"cols":1e999999999999,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"cols tiny exponent", `{"channel":1,"cols":1e-999999999999,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"zero limits accept nothing", `{"channel":1,"cols":1,"rows":1}`, Limits{}, 0, 0, "cols"},
		{"case folded name is not cols", `{"channel":1,"Cols":80,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"duplicate cols", `{"channel":1,"cols":80,"cols":0,"rows":24}`, rpcTestLimits, 0, 0, "cols"},
		{"channel 0", `{"channel":0,"cols":80,"rows":24}`, rpcTestLimits, 0, 0, "channel"},
		{"channel negative", `{"channel":-1,"cols":80,"rows":24}`, rpcTestLimits, 0, 0, "channel"},
		{"channel u32 max + 1", `{"channel":4294967296,"cols":80,"rows":24}`, rpcTestLimits, 0, 0, "channel"},
		{"channel fractional", `{"channel":1.5,"cols":80,"rows":24}`, rpcTestLimits, 0, 0, "channel"},
		{"channel string", `{"channel":"1","cols":80,"rows":24}`, rpcTestLimits, 0, 0, "channel"},
		{"channel missing", `{"cols":80,"rows":24}`, rpcTestLimits, 0, 0, "channel"},
		{"params missing", ``, rpcTestLimits, 0, 0, "channel"},
		{"params null", `null`, rpcTestLimits, 0, 0, "channel"},
		{"params array", `[1,80,24]`, rpcTestLimits, 0, 0, "params"},
		{"params string", `"x"`, rpcTestLimits, 0, 0, "params"},
		{"params not json", `{`, rpcTestLimits, 0, 0, "params"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, e := DecodeResize(json.RawMessage(tt.params), tt.lim)
			if tt.wantParam != "" {
				wantRPCError(t, e, "invalid_params", tt.wantParam)
				return
			}
			if e != nil {
				t.Fatalf("DecodeResize(%s) = %v, want nil", tt.params, e)
			}
			if p.Cols != tt.wantCols || p.Rows != tt.wantRows || p.Channel == 0 {
				t.Errorf("DecodeResize(%s) = %+v, want cols %v rows %v", tt.params, p, tt.wantCols, tt.wantRows)
			}
		})
	}
}

func TestDecodeResizeMeta(t *testing.T) {
	p, e := DecodeResize(json.RawMessage(`{"channel":1,"cols":80,"rows":24,"_meta":{"traceparent":"tp","tracestate":"ts","x":1}}`), rpcTestLimits)
	if e != nil {
		t.Fatal(e)
	}
	if p.Meta == nil || *p.Meta != (Meta{Traceparent: "tp", Tracestate: "ts"}) {
		t.Errorf("meta = %+v, want {tp ts}", p.Meta)
	}
	for _, meta := range []string{`null`, `5`, `{"traceparent":5}`, `{}`, `[]`} {
		p, e := DecodeResize(json.RawMessage(`{"channel":1,"cols":80,"rows":24,"_meta":`+meta+`}`), rpcTestLimits)
		if e != nil || p.Meta != nil {
			t.Errorf("with _meta %s: meta = %+v, error = %v; want nil, nil", meta, p.Meta, e)
		}
	}
}

func TestDecodeOpen(t *testing.T) {
	long := strings.Repeat("n", 256)
	yes, no := true, false
	tests := []struct {
		name      string
		params    string
		want      OpenParams // checked on success
		wantKind  string
		wantParam string
	}{
		{"minimal", `{"channel":1,"cols":80,"rows":24}`, OpenParams{Channel: 1, Cols: 80, Rows: 24}, "", ""},
		{"everything", `{"channel":3,"cmd":["bash","-l",""],"cwd":"/tmp","env":{"FOO":"bar","_x9":""},"cols":80,"rows":24,"name":"` + long + `"}`,
			OpenParams{Channel: 3, Cmd: []string{"bash", "-l", ""}, Cwd: "/tmp", Env: map[string]string{"FOO": "bar", "_x9": ""}, Cols: 80, Rows: 24, Name: long}, "", ""},
		{"nulls are absent", `{"channel":1,"cols":80,"rows":24,"cmd":null,"cwd":null,"env":null,"name":null}`, OpenParams{Channel: 1, Cols: 80, Rows: 24}, "", ""},
		{"lowercase ld is not the loader's", `{"channel":1,"cols":80,"rows":24,"env":{"ld_x":"1","LDX":"1"}}`,
			OpenParams{Channel: 1, Cols: 80, Rows: 24, Env: map[string]string{"ld_x": "1", "LDX": "1"}}, "", ""},

		{"pipes without a size", `{"channel":1,"tty":false}`, OpenParams{Channel: 1, TTY: &no}, "", ""},
		{"pipes with a zero size", `{"channel":1,"tty":false,"cols":0,"rows":0}`, OpenParams{Channel: 1, TTY: &no}, "", ""},
		{"pipes with a size", `{"channel":1,"tty":false,"cols":80,"rows":24}`, OpenParams{Channel: 1, TTY: &no, Cols: 80, Rows: 24}, "", ""},
		{"tty true", `{"channel":1,"tty":true,"cols":80,"rows":24}`, OpenParams{Channel: 1, TTY: &yes, Cols: 80, Rows: 24}, "", ""},
		{"tty null is absent", `{"channel":1,"tty":null,"cols":80,"rows":24}`, OpenParams{Channel: 1, Cols: 80, Rows: 24}, "", ""},
		{"tty true needs a size", `{"channel":1,"tty":true}`, OpenParams{}, "invalid_params", "cols"},
		{"tty string", `{"channel":1,"tty":"false","cols":80,"rows":24}`, OpenParams{}, "invalid_params", "tty"},
		{"pipes with half a size", `{"channel":1,"tty":false,"cols":80}`, OpenParams{}, "invalid_params", "rows"},
		{"missing params", ``, OpenParams{}, "invalid_params", "channel"},
		{"channel 0", `{"channel":0,"cols":80,"rows":24}`, OpenParams{}, "invalid_params", "channel"},
		{"channel too big", `{"channel":4294967296,"cols":80,"rows":24}`, OpenParams{}, "invalid_params", "channel"},
		{"cols missing", `{"channel":1,"rows":24}`, OpenParams{}, "invalid_params", "cols"},
		{"rows over max", `{"channel":1,"cols":80,"rows":1001}`, OpenParams{}, "invalid_params", "rows"},
		{"rows fractional", `{"channel":1,"cols":80,"rows":24.5}`, OpenParams{}, "invalid_params", "rows"},
		{"cmd empty", `{"channel":1,"cols":80,"rows":24,"cmd":[]}`, OpenParams{}, "invalid_params", "cmd"},
		{"cmd empty program", `{"channel":1,"cols":80,"rows":24,"cmd":[""]}`, OpenParams{}, "invalid_params", "cmd"},
		{"cmd string", `{"channel":1,"cols":80,"rows":24,"cmd":"bash"}`, OpenParams{}, "invalid_params", "cmd"},
		{"cmd number element", `{"channel":1,"cols":80,"rows":24,"cmd":["bash",1]}`, OpenParams{}, "invalid_params", "cmd"},
		{"cmd null element", `{"channel":1,"cols":80,"rows":24,"cmd":["bash",null]}`, OpenParams{}, "invalid_params", "cmd"},
		{"cmd NUL", `{"channel":1,"cols":80,"rows":24,"cmd":["bash","a\u0000b"]}`, OpenParams{}, "invalid_params", "cmd"},
		{"cwd number", `{"channel":1,"cols":80,"rows":24,"cwd":1}`, OpenParams{}, "invalid_params", "cwd"},
		{"cwd NUL", `{"channel":1,"cols":80,"rows":24,"cwd":"/tmp\u0000"}`, OpenParams{}, "invalid_params", "cwd"},
		{"env array", `{"channel":1,"cols":80,"rows":24,"env":["A=1"]}`, OpenParams{}, "invalid_params", "env"},
		{"env number value", `{"channel":1,"cols":80,"rows":24,"env":{"A":1}}`, OpenParams{}, "invalid_params", "env"},
		{"env null value", `{"channel":1,"cols":80,"rows":24,"env":{"A":null}}`, OpenParams{}, "invalid_params", "env"},
		{"env NUL value", `{"channel":1,"cols":80,"rows":24,"env":{"A":"x\u0000"}}`, OpenParams{}, "invalid_params", "env"},
		{"env empty name", `{"channel":1,"cols":80,"rows":24,"env":{"":"x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env name digit first", `{"channel":1,"cols":80,"rows":24,"env":{"1A":"x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env name with =", `{"channel":1,"cols":80,"rows":24,"env":{"A=B":"x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env name with dash", `{"channel":1,"cols":80,"rows":24,"env":{"A-B":"x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env name non-ascii", `{"channel":1,"cols":80,"rows":24,"env":{"É":"x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env LD_PRELOAD", `{"channel":1,"cols":80,"rows":24,"env":{"LD_PRELOAD":"/x.so"}}`, OpenParams{}, "invalid_params", "env"},
		{"env LD_", `{"channel":1,"cols":80,"rows":24,"env":{"LD_":"x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env BASH_ENV", `{"channel":1,"cols":80,"rows":24,"env":{"BASH_ENV":"/x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env ENV", `{"channel":1,"cols":80,"rows":24,"env":{"ENV":"/x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env IFS", `{"channel":1,"cols":80,"rows":24,"env":{"IFS":"x"}}`, OpenParams{}, "invalid_params", "env"},
		{"env duplicate", `{"channel":1,"cols":80,"rows":24,"env":{"A":"1","A":"2"}}`, OpenParams{}, "invalid_params", "env"},
		{"name too long", `{"channel":1,"cols":80,"rows":24,"name":"` + long + `x"}`, OpenParams{}, "invalid_params", "name"},
		{"name number", `{"channel":1,"cols":80,"rows":24,"name":5}`, OpenParams{}, "invalid_params", "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, e := DecodeOpen(json.RawMessage(tt.params), rpcTestLimits)
			if tt.wantKind != "" {
				wantRPCError(t, e, tt.wantKind, tt.wantParam)
				return
			}
			if e != nil {
				t.Fatalf("DecodeOpen(%s) = %v, want nil", tt.params, e)
			}
			if !reflect.DeepEqual(p, tt.want) {
				t.Errorf("DecodeOpen(%s) = %+v, want %+v", tt.params, p, tt.want)
			}
		})
	}
}

func TestDecodeAttach(t *testing.T) {
	from := func(v int64) *int64 { return &v }
	tests := []struct {
		name      string
		params    string
		wantFrom  *int64
		wantKind  string
		wantParam string
		wantSize  [2]int
	}{
		{"with a size", `{"channel":2,"session":"` + rpcTestSession + `","cols":132,"rows":43}`, nil, "", "", [2]int{132, 43}},
		{"size at the limits", `{"channel":2,"session":"` + rpcTestSession + `","cols":1000,"rows":1}`, nil, "", "", [2]int{1000, 1}},
		{"cols without rows", `{"channel":2,"session":"` + rpcTestSession + `","cols":80}`, nil, "invalid_params", "rows", [2]int{}},
		{"rows without cols", `{"channel":2,"session":"` + rpcTestSession + `","rows":24}`, nil, "invalid_params", "cols", [2]int{}},
		{"cols 0", `{"channel":2,"session":"` + rpcTestSession + `","cols":0,"rows":24}`, nil, "invalid_params", "cols", [2]int{}},
		{"rows over the limit", `{"channel":2,"session":"` + rpcTestSession + `","cols":80,"rows":1001}`, nil, "invalid_params", "rows", [2]int{}},
		{"cols fractional", `{"channel":2,"session":"` + rpcTestSession + `","cols":80.5,"rows":24}`, nil, "invalid_params", "cols", [2]int{}},
		{"no from", `{"channel":2,"session":"` + rpcTestSession + `"}`, nil, "", "", [2]int{}},
		{"null from", `{"channel":2,"session":"` + rpcTestSession + `","from":null}`, nil, "", "", [2]int{}},
		{"from 0", `{"channel":2,"session":"` + rpcTestSession + `","from":0}`, from(0), "", "", [2]int{}},
		{"from 1024", `{"channel":2,"session":"` + rpcTestSession + `","from":1024}`, from(1024), "", "", [2]int{}},
		{"from max int64", `{"channel":2,"session":"` + rpcTestSession + `","from":9223372036854775807}`, from(math.MaxInt64), "", "", [2]int{}},

		{"from -1", `{"channel":2,"session":"` + rpcTestSession + `","from":-1}`, nil, "invalid_params", "from", [2]int{}},
		{"from fractional", `{"channel":2,"session":"` + rpcTestSession + `","from":1.5}`, nil, "invalid_params", "from", [2]int{}},
		{"from string", `{"channel":2,"session":"` + rpcTestSession + `","from":"0"}`, nil, "invalid_params", "from", [2]int{}},
		{"from beyond int64", `{"channel":2,"session":"` + rpcTestSession + `","from":9223372036854775808}`, nil, "invalid_params", "from", [2]int{}},
		{"missing params", ``, nil, "invalid_params", "channel", [2]int{}},
		{"channel 0", `{"channel":0,"session":"` + rpcTestSession + `"}`, nil, "invalid_params", "channel", [2]int{}},
		{"session missing", `{"channel":2}`, nil, "invalid_params", "session", [2]int{}},
		{"session number", `{"channel":2,"session":5}`, nil, "invalid_params", "session", [2]int{}},
		{"session elided as in protocol.md", `{"channel":2,"session":"9f0c…e1"}`, nil, "unknown_session", "", [2]int{}},
		{"session upper case", `{"channel":2,"session":"` + strings.ToUpper(rpcTestSession) + `"}`, nil, "unknown_session", "", [2]int{}},
		{"session short", `{"channel":2,"session":"` + rpcTestSession[:31] + `"}`, nil, "unknown_session", "", [2]int{}},
		{"session long", `{"channel":2,"session":"` + rpcTestSession + `0"}`, nil, "unknown_session", "", [2]int{}},
		{"session empty", `{"channel":2,"session":""}`, nil, "unknown_session", "", [2]int{}},
		{"session path", `{"channel":2,"session":"../../../../etc/passwd000000000"}`, nil, "unknown_session", "", [2]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, e := DecodeAttach(json.RawMessage(tt.params), rpcTestLimits)
			if tt.wantKind != "" {
				wantRPCError(t, e, tt.wantKind, tt.wantParam)
				return
			}
			if e != nil {
				t.Fatalf("DecodeAttach(%s) = %v, want nil", tt.params, e)
			}
			if p.Channel != 2 || p.Session != rpcTestSession || !reflect.DeepEqual(p.From, tt.wantFrom) ||
				[2]int{p.Cols, p.Rows} != tt.wantSize {
				t.Errorf("DecodeAttach(%s) = %+v, want channel 2, the session, from %v, size %v", tt.params, p, tt.wantFrom, tt.wantSize)
			}
		})
	}
}

func TestDecodeDetach(t *testing.T) {
	if p, e := DecodeDetach(json.RawMessage(`{"channel":4294967295}`)); e != nil || p.Channel != math.MaxUint32 {
		t.Errorf("DecodeDetach(max channel) = %+v, %v; want channel %v, nil", p, e, uint32(math.MaxUint32))
	}
	for _, params := range []string{``, `{}`, `{"channel":0}`, `{"channel":-1}`, `{"channel":4294967296}`, `{"channel":"1"}`, `{"channel":1.1}`} {
		_, e := DecodeDetach(json.RawMessage(params))
		wantRPCError(t, e, "invalid_params", "channel")
	}
	for params, want := range map[string]bool{`{"channel":1}`: false, `{"channel":1,"hold":null}`: false,
		`{"channel":1,"hold":false}`: false, `{"channel":1,"hold":true}`: true} {
		if p, e := DecodeDetach(json.RawMessage(params)); e != nil || p.Hold != want {
			t.Errorf("DecodeDetach(%s) = %+v, %v; want hold %v", params, p, e, want)
		}
	}
	for _, params := range []string{`{"channel":1,"hold":1}`, `{"channel":1,"hold":"true"}`} {
		_, e := DecodeDetach(json.RawMessage(params))
		wantRPCError(t, e, "invalid_params", "hold")
	}
}

func TestDecodeSignal(t *testing.T) {
	for _, name := range []string{"INT", "QUIT", "TERM", "HUP", "KILL", "TSTP", "CONT", "USR1", "USR2", "WINCH"} {
		for _, sent := range []string{name, "SIG" + name} {
			p, got, e := DecodeSignal(json.RawMessage(`{"channel":1,"signal":"` + sent + `"}`))
			if e != nil || got != name || p.Signal != sent || p.Channel != 1 {
				t.Errorf("DecodeSignal(%s) = %+v, %v, %v; want %v", sent, p, got, e, name)
			}
		}
	}
	for _, params := range []string{
		`{"channel":1}`, `{"channel":1,"signal":""}`, `{"channel":1,"signal":"int"}`,
		`{"channel":1,"signal":"SIG"}`, `{"channel":1,"signal":"SIGSIGINT"}`, `{"channel":1,"signal":"STOP"}`,
		`{"channel":1,"signal":"SEGV"}`, `{"channel":1,"signal":2}`, `{"channel":1,"signal":" INT"}`,
	} {
		_, sig, e := DecodeSignal(json.RawMessage(params))
		wantRPCError(t, e, "invalid_params", "signal")
		if sig != "" {
			t.Errorf("DecodeSignal(%s) signal = %q, want none", params, sig)
		}
	}
	_, _, e := DecodeSignal(json.RawMessage(`{"channel":0,"signal":"INT"}`))
	wantRPCError(t, e, "invalid_params", "channel")
}

func TestDecodeKill(t *testing.T) {
	if p, e := DecodeKill(json.RawMessage(`{"session":"` + rpcTestSession + `"}`)); e != nil || p.Session != rpcTestSession {
		t.Errorf("DecodeKill = %+v, %v; want the session, nil", p, e)
	}
	_, e := DecodeKill(nil)
	wantRPCError(t, e, "invalid_params", "session")
	_, e = DecodeKill(json.RawMessage(`{"session":"nope"}`))
	wantRPCError(t, e, "unknown_session", "")
	_, e = DecodeKill(json.RawMessage(`{"session":["` + rpcTestSession + `"]}`))
	wantRPCError(t, e, "invalid_params", "session")
}

func TestDecodeLease(t *testing.T) {
	tests := []struct {
		ttl       string
		want      int64
		wantParam string
	}{
		{"0", 0, ""},
		{"1", 1, ""},
		{"60000", 60000, ""},
		{"86400000", 86400000, ""},
		{"8.64e7", 86400000, ""},
		{"86400001", 0, "ttl_ms"},
		{"-1", 0, "ttl_ms"},
		{"1.5", 0, "ttl_ms"},
		{`"1000"`, 0, "ttl_ms"},
		{"null", 0, "ttl_ms"},
		{"", 0, "ttl_ms"}, // missing
	}
	for _, tt := range tests {
		params := `{"session":"` + rpcTestSession + `"`
		if tt.ttl != "" {
			params += `,"ttl_ms":` + tt.ttl
		}
		params += "}"
		p, e := DecodeLease(json.RawMessage(params))
		if tt.wantParam != "" {
			wantRPCError(t, e, "invalid_params", tt.wantParam)
			continue
		}
		if e != nil || p.TTLMs != tt.want || p.Session != rpcTestSession {
			t.Errorf("DecodeLease(%s) = %+v, %v; want ttl %v, nil", params, p, e, tt.want)
		}
	}
	_, e := DecodeLease(json.RawMessage(`{"session":"x","ttl_ms":0}`))
	wantRPCError(t, e, "unknown_session", "")
}

func TestDecodeInitialize(t *testing.T) {
	p, e := DecodeInitialize(json.RawMessage(`{"client":{"name":"my-plugin","version":"0.3","x":1},"capabilities":{"a":true},"_meta":{"traceparent":"tp"}}`))
	if e != nil {
		t.Fatal(e)
	}
	want := InitializeParams{Client: ClientInfo{"my-plugin", "0.3"}, Capabilities: map[string]any{"a": true}, Meta: &Meta{Traceparent: "tp"}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("DecodeInitialize = %+v, want %+v", p, want)
	}
	for _, ok := range []string{``, `null`, `{}`, `{"client":null,"capabilities":null}`, `{"client":{}}`} {
		if _, e := DecodeInitialize(json.RawMessage(ok)); e != nil {
			t.Errorf("DecodeInitialize(%s) = %v, want nil", ok, e)
		}
	}
	for _, tt := range []struct{ params, param string }{
		{`[]`, "params"},
		{`{"client":"me"}`, "client"},
		{`{"client":{"name":1}}`, "client.name"},
		{`{"client":{"version":0.3}}`, "client.version"},
		{`{"capabilities":[]}`, "capabilities"},
		{`{"capabilities":"all"}`, "capabilities"},
	} {
		_, e := DecodeInitialize(json.RawMessage(tt.params))
		wantRPCError(t, e, "invalid_params", tt.param)
	}
}

func TestDecodeList(t *testing.T) {
	for _, ok := range []string{``, `null`, `{}`, `{"x":1}`} {
		if _, e := DecodeList(json.RawMessage(ok)); e != nil {
			t.Errorf("DecodeList(%s) = %v, want nil", ok, e)
		}
	}
	_, e := DecodeList(json.RawMessage(`[]`))
	wantRPCError(t, e, "invalid_params", "params")
}

func TestJSONInteger(t *testing.T) {
	tests := []struct {
		lit    string
		want   int64
		wantOK bool
	}{
		{"0", 0, true},
		{"-0", 0, true},
		{"7", 7, true},
		{"-7", -7, true},
		{"80.0", 80, true},
		{"80.000", 80, true},
		{"8e1", 80, true},
		{"8E+1", 80, true},
		{"800e-1", 80, true},
		{"0.8e2", 80, true},
		{"0e999999999999999999999", 0, true},
		{"0.0e-5", 0, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9.223372036854775807e18", math.MaxInt64, true},
		{"1000000000000000000", 1e18, true},

		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"1e19", 0, false},
		{"99999999999999999999", 0, false},
		{"1e999999999999999999999999", 0, false},
		{"1.5", 0, false},
		{"1e-1", 0, false},
		{"805e-1", 0, false},
		{"1e-999999999999999999999", 0, false},
		{`"80"`, 0, false},
		{"true", 0, false},
		{"null", 0, false},
		{"[1]", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"1.", 0, false},
		{"1e", 0, false},
		{"1e+", 0, false},
		{".5", 0, false},
		{"1x", 0, false},
	}
	for _, tt := range tests {
		got, ok := jsonInteger([]byte(tt.lit))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("jsonInteger(%s) = %v, %v; want %v, %v", tt.lit, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestMarshalResponse(t *testing.T) {
	tests := []struct {
		name   string
		id     json.RawMessage
		result any
		err    *Error
		want   string
	}{
		{"result", json.RawMessage(`2`), map[string]any{"channel": 1}, nil, `{"jsonrpc":"2.0","id":2,"result":{"channel":1}}`},
		{"nil result is {}", json.RawMessage(`"s"`), nil, nil, `{"jsonrpc":"2.0","id":"s","result":{}}`},
		{"error", json.RawMessage(`3`), nil, ErrUnknownChannel(4), `{"jsonrpc":"2.0","id":3,"error":{"code":-32005,"message":"channel 4 is not bound","data":{"channel":4,"kind":"unknown_channel"}}}`},
		{"error wins over result", json.RawMessage(`3`), 1, ErrInternal("x"), `{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"x","data":{"kind":"internal"}}}`},
		{"null id", nil, nil, ErrBadFrame("short"), `{"jsonrpc":"2.0","id":null,"error":{"code":-32006,"message":"short","data":{"kind":"bad_frame"}}}`},
		{"invalid id becomes null", json.RawMessage(`{`), nil, ErrParse("x"), `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x","data":{"kind":"parse_error"}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(MarshalResponse(tt.id, tt.result, tt.err)); got != tt.want {
				t.Errorf("MarshalResponse = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMarshalResponseUnmarshalable(t *testing.T) {
	for _, tt := range []struct {
		result any
		err    *Error
	}{
		{make(chan int), nil},
		{math.Inf(1), nil},
		{nil, &Error{Code: 1, Message: "m", Data: map[string]any{"f": func() {}}}},
	} {
		b := MarshalResponse(json.RawMessage(`9`), tt.result, tt.err)
		var resp struct {
			ID    json.RawMessage `json:"id"`
			Error *Error          `json:"error"`
		}
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatalf("MarshalResponse produced %s: %v", b, err)
		}
		if string(resp.ID) != "9" || resp.Error == nil || resp.Error.Kind() != "internal" {
			t.Errorf("MarshalResponse(unmarshalable) = %s, want an internal error with id 9", b)
		}
	}
}

func TestMarshalNotification(t *testing.T) {
	tests := []struct {
		method string
		params any
		want   string
	}{
		{"session.gap", map[string]any{"channel": 1, "lost": 100}, `{"jsonrpc":"2.0","method":"session.gap","params":{"channel":1,"lost":100}}`},
		{"session.closed", struct {
			Channel uint32 `json:"channel"`
			Session string `json:"session"`
			Reason  string `json:"reason"`
		}{1, "s", "killed"}, `{"jsonrpc":"2.0","method":"session.closed","params":{"channel":1,"session":"s","reason":"killed"}}`},
		{"x", nil, `{"jsonrpc":"2.0","method":"x"}`},
	}
	for _, tt := range tests {
		if got := string(MarshalNotification(tt.method, tt.params)); got != tt.want {
			t.Errorf("MarshalNotification(%s) = %s, want %s", tt.method, got, tt.want)
		}
	}
	if !testutil.Panics(func() { MarshalNotification("x", make(chan int)) }) {
		t.Errorf("MarshalNotification of an unmarshalable value did not panic, want a panic")
	}
}

// TestParamsRoundTrip checks that the params types marshal to what their
// decoders accept, as the Go client relies on.
func TestParamsRoundTrip(t *testing.T) {
	from := int64(5)
	open := OpenParams{Channel: 1, Cmd: []string{"sh"}, Cwd: "/", Env: map[string]string{"A": "b"}, Cols: 80, Rows: 24, Name: "n", Meta: &Meta{Traceparent: "t"}}
	attach := AttachParams{Channel: 2, Session: rpcTestSession, From: &from, Cols: 100, Rows: 40}
	resize := ResizeParams{Channel: 3, Cols: 100, Rows: 50}
	signal := SignalParams{Channel: 4, Signal: "SIGTERM"}
	lease := LeaseParams{Session: rpcTestSession, TTLMs: 1000}
	mustJSON := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got, e := DecodeOpen(mustJSON(open), rpcTestLimits); e != nil || !reflect.DeepEqual(got, open) {
		t.Errorf("open round trip = %+v, %v; want %+v", got, e, open)
	}
	if got, e := DecodeAttach(mustJSON(attach), rpcTestLimits); e != nil || !reflect.DeepEqual(got, attach) {
		t.Errorf("attach round trip = %+v, %v; want %+v", got, e, attach)
	}
	if got, e := DecodeResize(mustJSON(resize), rpcTestLimits); e != nil || !reflect.DeepEqual(got, resize) {
		t.Errorf("resize round trip = %+v, %v; want %+v", got, e, resize)
	}
	if got, _, e := DecodeSignal(mustJSON(signal)); e != nil || !reflect.DeepEqual(got, signal) {
		t.Errorf("signal round trip = %+v, %v; want %+v", got, e, signal)
	}
	if got, e := DecodeLease(mustJSON(lease)); e != nil || !reflect.DeepEqual(got, lease) {
		t.Errorf("lease round trip = %+v, %v; want %+v", got, e, lease)
	}
	lim := mustJSON(rpcTestLimits)
	if want := `{"maxMessageBytes":65536,"maxInputBytes":65536,"maxChannels":64,"maxSessions":64,"maxCols":1000,"maxRows":1000,"maxOutputFrameBytes":32768}`; string(lim) != want {
		t.Errorf("Limits marshal to %s, want %s", lim, want)
	}
}

// FuzzParseRequest checks that ParseRequest never panics, that it refuses only
// with parse_error or invalid_request, and that every request it accepts
// re-marshals to a request it accepts again, equal to the first. The params of
// accepted requests also go through the Decode function of their method.
func FuzzParseRequest(f *testing.F) {
	for _, r := range protocolRequests {
		f.Add([]byte(r))
	}
	for _, r := range []string{
		``, `hello`, `null`, `5`, `"x"`, `[]`, `{}`,
		`[{"jsonrpc":"2.0","id":1,"method":"initialize"}]`,
		`{"jsonrpc":"2.0","method":"session.list"}`,
		`{"jsonrpc":"1.0","id":1,"method":"initialize"}`,
		`{"jsonrpc":"2.0","id":null,"method":"initialize"}`,
		`{"jsonrpc":"2.0","id":{},"method":"initialize"}`,
		`{"jsonrpc":"2.0","id":1,"method":""}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.resize","params":{"channel":1,"cols":1.5,"rows":1e400}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.resize","params":{"channel":4294967296,"cols":"80","rows":-1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.open","params":{"channel":1,"cols":80,"rows":24,"env":{"LD_PRELOAD":"x"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.open","params":{"channel":1,"cols":80,"rows":24,"cmd":["a\u0000"]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.attach","params":{"channel":1,"session":"` + rpcTestSession + `","from":-1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.lease","params":{"session":"` + rpcTestSession + `","ttl_ms":86400001}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.signal","params":{"channel":1,"signal":"SIGWINCH"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}`,
		`{"jsonrpc":"2.0","id":"<&>\u2028","method":"m\xff","params":[{"a":"<"}]}`,
		"{\"jsonrpc\":\"2.0\",\xff}",
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	} {
		f.Add([]byte(r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, e := ParseRequest(b)
		if e != nil {
			if k := e.Kind(); k != KindParseError && k != KindInvalidRequest {
				t.Fatalf("ParseRequest(%q) error kind %q, want parse_error or invalid_request", b, k)
			}
			if req != nil && (len(req.ID) == 0 || req.Method != "" || req.Params != nil) {
				t.Fatalf("ParseRequest(%q) returned %+v with its error, want nil or only an id", b, req)
			}
			if !json.Valid(MarshalResponse(nil, nil, e)) {
				t.Fatalf("the error response to %q is not valid JSON", b)
			}
			return
		}
		if req.JSONRPC != "2.0" || req.Method == "" {
			t.Fatalf("ParseRequest(%q) accepted %+v", b, req)
		}
		if len(req.ID) > 0 && !strings.ContainsRune(`"-0123456789`, rune(req.ID[0])) {
			t.Fatalf("ParseRequest(%q) accepted id %s", b, req.ID)
		}
		if len(req.Params) > 0 && req.Params[0] != '{' && req.Params[0] != '[' {
			t.Fatalf("ParseRequest(%q) accepted params %s", b, req.Params)
		}
		if !json.Valid(MarshalResponse(req.ID, nil, nil)) {
			t.Fatalf("the response to %q is not valid JSON", b)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-marshal of %+v: %v", req, err)
		}
		req2, e := ParseRequest(again)
		if e != nil {
			t.Fatalf("ParseRequest(re-marshaled %s) = %v, want nil", again, e)
		}
		if req2.Method != req.Method || req2.IsNotification() != req.IsNotification() ||
			!sameJSON(req2.ID, req.ID) || !sameJSON(req2.Params, req.Params) {
			t.Fatalf("round trip of %q: %+v, want %+v", b, req2, req)
		}
		_ = decodeByMethod(req.Method, req.Params, rpcTestLimits) // panics on a broken invariant
	})
}

// sameJSON reports whether a and b hold the same JSON value, numbers compared
// by their literal.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// FuzzDecodeResize checks that DecodeResize never panics, that every size it
// accepts lies within the limits and within uint16, and that everything it
// refuses is invalid_params naming a param.
func FuzzDecodeResize(f *testing.F) {
	for _, p := range []string{
		`{"channel":1,"cols":80,"rows":24}`,
		`{"channel":4294967295,"cols":1000,"rows":1000}`,
		`{"channel":1,"cols":1e3,"rows":80.0}`,
		`{"channel":1,"cols":0,"rows":24}`,
		`{"channel":1,"cols":1001,"rows":24}`,
		`{"channel":1,"cols":-1,"rows":24}`,
		`{"channel":1,"cols":1.5,"rows":24}`,
		`{"channel":1,"cols":"80","rows":24}`,
		`{"channel":1,"cols":65616,"rows":24}`,
		`{"channel":1,"cols":18446744073709551696,"rows":24}`,
		`{"channel":1,"cols":1e999999999,"rows":24}`,
		`{"channel":0,"cols":80,"rows":24}`,
		`{"channel":4294967296,"cols":80,"rows":24}`,
		`{"channel":1,"cols":80,"cols":81,"rows":24}`,
		`{"channel":1,"rows":24}`,
		`[1,80,24]`, `null`, ``, `{`,
	} {
		f.Add([]byte(p), 1000, 1000)
		f.Add([]byte(p), 1<<20, 0)
	}
	f.Fuzz(func(t *testing.T, b []byte, maxCols, maxRows int) {
		lim := Limits{MaxCols: maxCols, MaxRows: maxRows}
		p, e := DecodeResize(b, lim)
		if e != nil {
			if e.Kind() != KindInvalidParams || e.Code != CodeInvalidParams {
				t.Fatalf("DecodeResize(%q) error %v, want invalid_params", b, e)
			}
			if param, _ := e.Data["param"].(string); param == "" { // a repeated member names itself
				t.Fatalf("DecodeResize(%q) error %v names no param", b, e)
			}
			return
		}
		if p.Channel == 0 {
			t.Fatalf("DecodeResize(%q) accepted channel 0", b)
		}
		if p.Cols < 1 || p.Cols > maxCols || p.Cols > math.MaxUint16 {
			t.Fatalf("DecodeResize(%q, maxCols %d) accepted cols %d", b, maxCols, p.Cols)
		}
		if p.Rows < 1 || p.Rows > maxRows || p.Rows > math.MaxUint16 {
			t.Fatalf("DecodeResize(%q, maxRows %d) accepted rows %d", b, maxRows, p.Rows)
		}
		if uint16(p.Cols) == 0 || uint16(p.Rows) == 0 || int(uint16(p.Cols)) != p.Cols || int(uint16(p.Rows)) != p.Rows {
			t.Fatalf("sizes %dx%d do not survive uint16", p.Cols, p.Rows)
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		p2, e := DecodeResize(again, lim)
		if e != nil || !reflect.DeepEqual(p2, p) {
			t.Fatalf("round trip of %+v = %+v, %v", p, p2, e)
		}
	})
}
