package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Binary frame types (protocol.md §2).
const (
	FrameOutput byte = 1 // server → client: terminal output of the session bound to the channel
	FrameInput  byte = 2 // client → server: bytes for the session's PTY
	FrameAck    byte = 3 // client → server: u32 big-endian count of output bytes consumed
	// FrameStderr (server → client) is output of a pipe session's stderr, sent only to a client
	// that declared CapabilityPipes; it shares the channel's offsets and credit with FrameOutput.
	FrameStderr byte = 4
)

// HeaderLen is the size of a binary frame header: type u8, channel u32 BE.
const HeaderLen = 5

// MaxOutputPayload is the largest payload of one output frame. Header bytes
// never count toward flow control, only payload bytes do.
const MaxOutputPayload = 32 << 10

// ackPayloadLen is the exact payload size of an ack frame: one u32.
const ackPayloadLen = 4

// Errors returned by ParseFrame, possibly wrapped with detail; match them with
// errors.Is. Each one is answered on the wire with ErrBadFrame and id null,
// and the socket goes on (protocol.md §2).
var (
	ErrShortFrame       = errors.New("proto: frame shorter than its 5-byte header")
	ErrUnknownFrameType = errors.New("proto: unknown frame type")
	ErrBadAck           = errors.New("proto: ack payload is not exactly 4 bytes")
	ErrZeroChannel      = errors.New("proto: channel 0 is reserved")
)

// Frame is one decoded binary WebSocket message. It is a plain value: its
// Payload aliases the buffer given to ParseFrame, so it is valid only as long
// as the caller keeps that buffer unchanged; copy it to keep it longer.
type Frame struct {
	Type    byte
	Channel uint32
	Payload []byte
}

// ParseFrame decodes b as a binary frame. It checks the header length, the
// type (output, stderr, input or ack), that the channel is not 0, and that an ack
// carries exactly 4 payload bytes. It does not check direction or size limits:
// the caller refuses an input frame larger than maxInputBytes (limit_exceeded)
// and an output frame larger than MaxOutputPayload.
//
// The returned Payload aliases b; ParseFrame never copies or allocates on
// success.
func ParseFrame(b []byte) (Frame, error) {
	if len(b) < HeaderLen {
		return Frame{}, fmt.Errorf("%w: got %d bytes", ErrShortFrame, len(b))
	}
	f := Frame{
		Type:    b[0],
		Channel: binary.BigEndian.Uint32(b[1:HeaderLen]),
		Payload: b[HeaderLen:],
	}
	switch f.Type {
	case FrameOutput, FrameInput, FrameStderr:
	case FrameAck:
		if len(f.Payload) != ackPayloadLen {
			return Frame{}, fmt.Errorf("%w: got %d bytes", ErrBadAck, len(f.Payload))
		}
	default:
		return Frame{}, fmt.Errorf("%w %d", ErrUnknownFrameType, f.Type)
	}
	if f.Channel == 0 {
		return Frame{}, ErrZeroChannel
	}
	return f, nil
}

// AppendFrame appends the frame [typ][ch u32 BE][payload] to dst and returns
// the extended slice. It validates nothing: the caller picks a known type, a
// channel other than 0, and keeps output payloads within MaxOutputPayload.
func AppendFrame(dst []byte, typ byte, ch uint32, payload []byte) []byte {
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint32(dst, ch)
	return append(dst, payload...)
}

// AckCount returns the byte count carried by an ack frame. It is meaningful
// only for a frame that ParseFrame accepted as FrameAck; for any payload that
// is not exactly 4 bytes it returns 0 rather than panicking.
func (f Frame) AckCount() uint32 {
	if len(f.Payload) != ackPayloadLen {
		return 0
	}
	return binary.BigEndian.Uint32(f.Payload)
}

// AppendAck appends an ack frame for n consumed bytes on channel ch to dst.
func AppendAck(dst []byte, ch uint32, n uint32) []byte {
	dst = append(dst, FrameAck)
	dst = binary.BigEndian.AppendUint32(dst, ch)
	return binary.BigEndian.AppendUint32(dst, n)
}
