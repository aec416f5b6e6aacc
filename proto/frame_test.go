package proto

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestParseFrame(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    Frame
		wantErr error
	}{
		// protocol.md §8, byte for byte.
		{"output", []byte("\x01\x00\x00\x00\x01$ "), Frame{FrameOutput, 1, []byte("$ ")}, nil},
		{"input", []byte("\x02\x00\x00\x00\x01echo hi\r"), Frame{FrameInput, 1, []byte("echo hi\r")}, nil},
		{"ack 23", []byte{3, 0, 0, 0, 1, 0, 0, 0, 23}, Frame{FrameAck, 1, []byte{0, 0, 0, 23}}, nil},
		{"empty input", []byte{2, 0, 0, 0, 7}, Frame{FrameInput, 7, []byte{}}, nil},
		{"empty output", []byte{1, 0, 0, 0, 7}, Frame{FrameOutput, 7, []byte{}}, nil},
		{"max channel", []byte{2, 0xff, 0xff, 0xff, 0xff, 'x'}, Frame{FrameInput, math.MaxUint32, []byte("x")}, nil},
		{"big endian channel", []byte{1, 0x01, 0x02, 0x03, 0x04}, Frame{FrameOutput, 0x01020304, []byte{}}, nil},
		{"ack max count", []byte{3, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff}, Frame{FrameAck, 9, []byte{0xff, 0xff, 0xff, 0xff}}, nil},

		{"nil", nil, Frame{}, ErrShortFrame},
		{"empty", []byte{}, Frame{}, ErrShortFrame},
		{"type only", []byte{1}, Frame{}, ErrShortFrame},
		{"4 bytes", []byte{2, 0, 0, 1}, Frame{}, ErrShortFrame},
		{"type 0", []byte{0, 0, 0, 0, 1}, Frame{}, ErrUnknownFrameType},
		{"stderr", []byte{4, 0, 0, 0, 1, 'x'}, Frame{FrameStderr, 1, []byte("x")}, nil},
		{"type 5", []byte{5, 0, 0, 0, 1, 'x'}, Frame{}, ErrUnknownFrameType},
		{"type 255", []byte{255, 0, 0, 0, 1}, Frame{}, ErrUnknownFrameType},
		{"zero channel output", []byte{1, 0, 0, 0, 0, 'x'}, Frame{}, ErrZeroChannel},
		{"zero channel input", []byte{2, 0, 0, 0, 0}, Frame{}, ErrZeroChannel},
		{"zero channel ack", []byte{3, 0, 0, 0, 0, 0, 0, 0, 1}, Frame{}, ErrZeroChannel},
		{"ack empty", []byte{3, 0, 0, 0, 1}, Frame{}, ErrBadAck},
		{"ack 3 bytes", []byte{3, 0, 0, 0, 1, 0, 0, 1}, Frame{}, ErrBadAck},
		{"ack 5 bytes", []byte{3, 0, 0, 0, 1, 0, 0, 0, 1, 0}, Frame{}, ErrBadAck},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFrame(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseFrame(%x) error = %v, want %v", tt.in, err, tt.wantErr)
			}
			if got.Type != tt.want.Type || got.Channel != tt.want.Channel || !bytes.Equal(got.Payload, tt.want.Payload) {
				t.Errorf("ParseFrame(%x) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseFramePayloadAliasesInput(t *testing.T) {
	b := []byte{2, 0, 0, 0, 1, 'a', 'b'}
	f, err := ParseFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	b[5] = 'z'
	if got, want := string(f.Payload), "zb"; got != want {
		t.Errorf("payload after changing the buffer = %q, want %q (it must alias, not copy)", got, want)
	}
}

func TestAppendFrame(t *testing.T) {
	tests := []struct {
		name    string
		dst     []byte
		typ     byte
		ch      uint32
		payload []byte
		want    []byte
	}{
		{"output", nil, FrameOutput, 1, []byte("$ "), []byte("\x01\x00\x00\x00\x01$ ")},
		{"input appends to dst", []byte("xx"), FrameInput, 0x01020304, []byte("hi"), []byte("xx\x02\x01\x02\x03\x04hi")},
		{"empty payload", nil, FrameOutput, math.MaxUint32, nil, []byte{1, 0xff, 0xff, 0xff, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AppendFrame(tt.dst, tt.typ, tt.ch, tt.payload); !bytes.Equal(got, tt.want) {
				t.Errorf("AppendFrame = %x, want %x", got, tt.want)
			}
		})
	}
}

func TestAppendAck(t *testing.T) {
	tests := []struct {
		ch, n uint32
		want  []byte
	}{
		{1, 23, []byte{3, 0, 0, 0, 1, 0, 0, 0, 0x17}}, // protocol.md §8
		{math.MaxUint32, math.MaxUint32, []byte{3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{2, 65536, []byte{3, 0, 0, 0, 2, 0, 1, 0, 0}},
		{5, 0, []byte{3, 0, 0, 0, 5, 0, 0, 0, 0}},
	}
	for _, tt := range tests {
		got := AppendAck(nil, tt.ch, tt.n)
		if !bytes.Equal(got, tt.want) {
			t.Errorf("AppendAck(%d, %d) = %x, want %x", tt.ch, tt.n, got, tt.want)
		}
		f, err := ParseFrame(got)
		if err != nil {
			t.Fatalf("ParseFrame(AppendAck(%d, %d)) error = %v, want nil", tt.ch, tt.n, err)
		}
		if f.Type != FrameAck || f.Channel != tt.ch || f.AckCount() != tt.n {
			t.Errorf("parsed ack = {%d %d count %d}, want {%d %d count %d}",
				f.Type, f.Channel, f.AckCount(), FrameAck, tt.ch, tt.n)
		}
	}
}

func TestAckCountNotAnAck(t *testing.T) {
	for _, p := range [][]byte{nil, {1, 2, 3}, {1, 2, 3, 4, 5}} {
		if got := (Frame{Type: FrameAck, Channel: 1, Payload: p}).AckCount(); got != 0 {
			t.Errorf("AckCount of a %d-byte payload = %d, want 0", len(p), got)
		}
	}
}

func TestAppendFrameAllocs(t *testing.T) {
	buf := make([]byte, 0, HeaderLen+MaxOutputPayload)
	payload := make([]byte, MaxOutputPayload)
	allocs := testing.AllocsPerRun(100, func() {
		out := AppendFrame(buf[:0], FrameOutput, 1, payload)
		if _, err := ParseFrame(out); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendFrame+ParseFrame allocate %v times per frame, want 0", allocs)
	}
}

// FuzzParseFrame checks that ParseFrame never panics, that what it accepts
// re-encodes to the same bytes, and that what it refuses is refused with one
// of its sentinel errors, for the right reason.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x01$ "))                      // output
	f.Add([]byte("\x01\x00\x00\x00\x01echo hi\r\nhi\r\n$ "))     // output
	f.Add([]byte("\x02\x00\x00\x00\x01echo hi\r"))               // input
	f.Add([]byte{3, 0, 0, 0, 1, 0, 0, 0, 0x17})                  // ack 23
	f.Add([]byte{3, 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0})         // ack on the last channel
	f.Add([]byte{})                                              // short
	f.Add([]byte{2, 0, 0, 1})                                    // short
	f.Add([]byte{2, 0, 0, 0, 0, 'x'})                            // zero channel
	f.Add([]byte{3, 0, 0, 0, 1, 0, 0, 1})                        // short ack
	f.Add([]byte{3, 0, 0, 0, 1, 0, 0, 0, 1, 0})                  // long ack
	f.Add([]byte{4, 0, 0, 0, 1})                                 // stderr
	f.Add([]byte{5, 0, 0, 0, 1})                                 // unknown type
	f.Add(AppendFrame(nil, FrameOutput, 7, make([]byte, 1<<10))) // bigger payload
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		if err != nil {
			sentinels := []error{ErrShortFrame, ErrUnknownFrameType, ErrBadAck, ErrZeroChannel}
			matched := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					matched++
				}
			}
			if matched != 1 {
				t.Fatalf("ParseFrame(%x) error %v matches %d sentinels, want 1", b, err, matched)
			}
			switch {
			case len(b) < HeaderLen:
				if !errors.Is(err, ErrShortFrame) {
					t.Fatalf("ParseFrame(%x) error = %v, want %v", b, err, ErrShortFrame)
				}
			case b[0] < FrameOutput || b[0] > FrameStderr:
				if !errors.Is(err, ErrUnknownFrameType) {
					t.Fatalf("ParseFrame(%x) error = %v, want %v", b, err, ErrUnknownFrameType)
				}
			}
			return
		}
		if len(b) < HeaderLen || fr.Channel == 0 {
			t.Fatalf("ParseFrame(%x) accepted a short frame or channel 0: %+v", b, fr)
		}
		switch fr.Type {
		case FrameOutput, FrameInput, FrameStderr:
		case FrameAck:
			if len(fr.Payload) != 4 {
				t.Fatalf("accepted ack with %d payload bytes, want 4", len(fr.Payload))
			}
			if again := AppendAck(nil, fr.Channel, fr.AckCount()); !bytes.Equal(again, b) {
				t.Fatalf("AppendAck(parsed) = %x, want %x", again, b)
			}
		default:
			t.Fatalf("accepted unknown type %d", fr.Type)
		}
		if len(fr.Payload) != len(b)-HeaderLen {
			t.Fatalf("payload has %d bytes, want %d", len(fr.Payload), len(b)-HeaderLen)
		}
		again := AppendFrame(nil, fr.Type, fr.Channel, fr.Payload)
		if !bytes.Equal(again, b) {
			t.Fatalf("AppendFrame(ParseFrame(%x)) = %x, want the input", b, again)
		}
		fr2, err := ParseFrame(again)
		if err != nil || fr2.Type != fr.Type || fr2.Channel != fr.Channel || !bytes.Equal(fr2.Payload, fr.Payload) {
			t.Fatalf("second round trip = %+v, %v; want %+v, nil", fr2, err, fr)
		}
	})
}
