package proto

import (
	"encoding/json"
	"fmt"
)

// Recordings (protocol.md §4, recording.list and recording.read): a recorded session's
// asciicast v2 file, whose id is the session's.

// The recording methods.
const (
	MethodRecordingList = "recording.list"
	MethodRecordingRead = "recording.read"
)

// MaxRecordingRead bounds recording.read's length: its answer (base64 in JSON, a third larger)
// goes ahead of the socket's output, so it is kept to what a frame of output is worth.
const MaxRecordingRead = 64 << 10

// RecordingListParams are the params of recording.list: Session, when set, lists only that
// session's recording.
type RecordingListParams struct {
	Session string `json:"session,omitempty"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// RecordingReadParams are the params of recording.read: Length bytes (1..MaxRecordingRead) of
// the recording's file from Offset.
type RecordingReadParams struct {
	Recording string `json:"recording"`
	Offset    int64  `json:"offset"`
	Length    int    `json:"length"`
	Meta      *Meta  `json:"_meta,omitempty"`
}

// RecordingInfo describes one recording.
type RecordingInfo struct {
	Recording string `json:"recording"` // its id: the session's
	Session   string `json:"session"`
	Name      string `json:"name,omitempty"`
	Command   string `json:"command,omitempty"`
	Started   int64  `json:"started"` // Unix ms
	Cols      int    `json:"cols"`
	Rows      int    `json:"rows"`
	Bytes     int64  `json:"bytes"`  // the file's size now
	Active    bool   `json:"active"` // still being written
}

// RecordingListResult is the result of recording.list, oldest first.
type RecordingListResult struct {
	Recordings []RecordingInfo `json:"recordings"`
}

// RecordingReadResult is the result of recording.read: Data (base64 on the wire) holds the
// file's bytes from Offset, at most the length asked; Size is the file's size when read, EOF
// whether Data reaches it.
type RecordingReadResult struct {
	Recording string `json:"recording"`
	Offset    int64  `json:"offset"`
	Data      []byte `json:"data"`
	Size      int64  `json:"size"`
	EOF       bool   `json:"eof"`
}

// DecodeRecordingList decodes recording.list's params: session absent, or a session id (a
// malformed one is unknown_session).
func DecodeRecordingList(raw json.RawMessage) (RecordingListParams, *Error) {
	var p RecordingListParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if _, ok := m["session"]; ok && !isJSONNull(m["session"]) {
		if p.Session, e = requiredSessionID(m); e != nil {
			return p, e
		}
	}
	return p, nil
}

// DecodeRecordingRead decodes recording.read's params: recording a session id (a malformed one
// is unknown_session), offset ≥ 0, length in 1..MaxRecordingRead.
func DecodeRecordingRead(raw json.RawMessage) (RecordingReadParams, *Error) {
	var p RecordingReadParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	id, present, e := stringMember(m, "recording", "recording")
	if e != nil {
		return p, e
	}
	if !present {
		return p, ErrInvalidParams("recording", "recording is required: a recording id")
	}
	if !wellFormedSessionID(id) {
		return p, ErrUnknownSession(id)
	}
	p.Recording = id
	off, _, e := intMember(m, "offset", 0, 1<<53)
	if e != nil {
		return p, e
	}
	p.Offset = off
	n, present, e := intMember(m, "length", 1, MaxRecordingRead)
	if e != nil {
		return p, e
	}
	if !present {
		return p, ErrInvalidParams("length", fmt.Sprintf("length is required: 1..%d bytes", MaxRecordingRead))
	}
	p.Length = int(n)
	return p, nil
}

// optionalBool returns member name of m, false when absent or null; anything but a JSON
// boolean is invalid_params.
func optionalBool(m map[string]json.RawMessage, name string) (bool, *Error) {
	raw, ok := m[name]
	if !ok || isJSONNull(raw) {
		return false, nil
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, ErrInvalidParams(name, name+" must be true or false")
}
