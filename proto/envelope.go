package proto

import (
	"encoding/json"
	"fmt"
)

// jsonrpcVersion is the only value of the "jsonrpc" member we speak.
const jsonrpcVersion = "2.0"

// Request is a JSON-RPC 2.0 request or, without ID, a notification. It is
// plain data owned by whoever holds it; ParseRequest's result does not alias
// the input buffer.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"` // a JSON number or string; nil for a notification
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"` // an object or array; nil when absent or null
}

// IsNotification reports whether r has no id, so it must get no response.
func (r *Request) IsNotification() bool { return len(r.ID) == 0 }

// Response is a JSON-RPC 2.0 response: exactly one of Result and Error is
// set. ID is the request's id, or null (nil) when it could not be determined.
// It is plain data; use MarshalResponse to build the bytes.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Notification is a JSON-RPC 2.0 notification (no id), such as session.gap.
// It is plain data; use MarshalNotification to build the bytes.
type Notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// MarshalResponse returns the text message answering the request with id:
// the error if err is non-nil, else result ({} when result is nil, as for
// session.signal). A nil or invalid id is sent as null. If result or err.Data
// cannot be marshaled (a bug), the answer is an internal error with the same
// id, so a request always gets exactly one well-formed response.
func MarshalResponse(id json.RawMessage, result any, err *Error) []byte {
	if len(id) == 0 || !json.Valid(id) {
		id = nil
	}
	resp := Response{JSONRPC: jsonrpcVersion, ID: id}
	switch {
	case err != nil:
		resp.Error = err
	case result == nil:
		resp.Result = struct{}{}
	default:
		resp.Result = result
	}
	b, mErr := json.Marshal(resp)
	if mErr != nil {
		resp.Result = nil
		resp.Error = ErrInternal("marshal response: " + mErr.Error())
		b, _ = json.Marshal(resp) // strings and a valid id only: cannot fail
	}
	return b
}

// MarshalNotification returns the text message of notification method with
// params (omitted when nil). params are built by the gateway itself, so a
// value that cannot be marshaled is a bug, and MarshalNotification panics.
func MarshalNotification(method string, params any) []byte {
	b, err := json.Marshal(Notification{JSONRPC: jsonrpcVersion, Method: method, Params: params})
	if err != nil {
		panic(fmt.Sprintf("proto: marshal notification %s: %v", method, err))
	}
	return b
}
