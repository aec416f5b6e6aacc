package mux

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// recording.list and recording.read: the recordings of the gateway's --record directory that
// the socket's principal owns (every one for an admin). A read-only principal reads none: a
// recording may hold input, which it never sees live; nor does a share link's socket, which sees
// one session live and nothing of the principal's past.

func (c *conn) handleRecordingList(req *proto.Request) {
	p, e := proto.DecodeRecordingList(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly || c.opts.Session != "" {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principals and share links cannot list recordings"))
		return
	}
	c.slow(req.ID, func() { // reads a header per recording: off the read loop
		infos, err := c.reg.Recordings(c.opts.Principal, c.opts.Admin, p.Session)
		if err != nil {
			c.replyErr(req.ID, proto.ErrInternal(err.Error()))
			return
		}
		out := proto.RecordingListResult{Recordings: make([]proto.RecordingInfo, 0, len(infos))}
		for _, in := range infos {
			out.Recordings = append(out.Recordings, proto.RecordingInfo{Recording: in.ID, Session: in.ID,
				Name: in.Name, Command: in.Command, Started: in.Started.UnixMilli(), Cols: in.Cols,
				Rows: in.Rows, Bytes: in.Bytes, Active: in.Active})
		}
		c.reply(req.ID, out)
	})
}

func (c *conn) handleRecordingRead(req *proto.Request) {
	p, e := proto.DecodeRecordingRead(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly || c.opts.Session != "" {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principals and share links cannot read recordings"))
		return
	}
	c.slow(req.ID, func() {
		data, size, err := c.reg.ReadRecording(p.Recording, c.opts.Principal, c.opts.Admin, p.Offset, p.Length)
		if err != nil {
			c.replyErr(req.ID, sessionError(err, p.Recording))
			return
		}
		c.reply(req.ID, proto.RecordingReadResult{Recording: p.Recording, Offset: p.Offset, Data: data,
			Size: size, EOF: p.Offset+int64(len(data)) >= size})
	})
}

// recordingAttrs are the attributes naming s's recording and the point in it now.
func recordingAttrs(s *session.Session) []attribute.KeyValue {
	off, ok := s.Recording()
	if !ok {
		return nil
	}
	return []attribute.KeyValue{attribute.String(otel.AttrRecordingID, s.ID()),
		attribute.Float64(otel.AttrRecordingOffset, off.Seconds())}
}
