package client

import (
	"context"
	"fmt"
	"io"

	"github.com/muxterm/muxterm/proto"
)

// Recordings lists the recordings the caller may see (docs/protocol.md §4 recording.list),
// oldest first; only session id's when id is not "".
func (c *Client) Recordings(ctx context.Context, id string) ([]proto.RecordingInfo, error) {
	var res proto.RecordingListResult
	err := c.Call(ctx, proto.MethodRecordingList, proto.RecordingListParams{Session: id}, &res)
	return res.Recordings, err
}

// ReadRecording reads up to n bytes (at most proto.MaxRecordingRead) of recording id's file
// from offset off.
func (c *Client) ReadRecording(ctx context.Context, id string, off int64, n int) (proto.RecordingReadResult, error) {
	var res proto.RecordingReadResult
	err := c.Call(ctx, proto.MethodRecordingRead, proto.RecordingReadParams{Recording: id, Offset: off, Length: n}, &res)
	if err == nil && (res.Offset != off || len(res.Data) > n) {
		return res, violation("recording.read at %d for %d bytes: %d bytes at %d", off, n, len(res.Data), res.Offset)
	}
	return res, err
}

// ExportRecording writes recording id's file, as it is now, to w and returns its length.
func (c *Client) ExportRecording(ctx context.Context, id string, w io.Writer) (int64, error) {
	var off int64
	for {
		res, err := c.ReadRecording(ctx, id, off, proto.MaxRecordingRead)
		if err != nil {
			return off, fmt.Errorf("export recording %s: %w", id, err)
		}
		if _, err := w.Write(res.Data); err != nil {
			return off, fmt.Errorf("export recording %s: %w", id, err)
		}
		off += int64(len(res.Data))
		if res.EOF || len(res.Data) == 0 {
			return off, nil
		}
	}
}
