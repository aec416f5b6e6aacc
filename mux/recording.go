package mux

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// recording.list and recording.read: the recordings of the gateway's --record directory that
// the socket's principal owns (every one for an admin) and, in a cluster (Remote), those of the
// cluster's store and of the other nodes' recordings being written. A read-only principal reads none: a
// recording may hold input, which it never sees live; nor does a share link's socket, which sees
// one session live and nothing of the principal's past.

// remoteRecordingsWait bounds a recording.list's or recording.read's questions to the rest of
// the cluster (the store, the nodes writing recordings).
const remoteRecordingsWait = 10 * time.Second

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
	sctx, span := c.startSpan(otel.SpanRecordingList, proto.MethodRecordingList, p.Meta, 0)
	if p.Session != "" {
		span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
	}
	c.slowSpan(req.ID, span, func() { // reads a header per recording: off the read loop
		infos, err := c.reg.Recordings(c.opts.Principal, c.opts.Admin, p.Session)
		if err != nil {
			e := proto.ErrInternal(err.Error())
			spanError(span, e)
			c.replyErr(req.ID, e)
			return
		}
		out := proto.RecordingListResult{Recordings: make([]proto.RecordingInfo, 0, len(infos))}
		seen := make(map[string]bool, len(infos))
		for _, in := range infos {
			seen[in.ID] = true
			out.Recordings = append(out.Recordings, proto.RecordingInfo{Recording: in.ID, Session: in.ID,
				Name: in.Name, Command: in.Command, Started: in.Started.UnixMilli(), Cols: in.Cols,
				Rows: in.Rows, Bytes: in.Bytes, Active: in.Active})
		}
		if c.opts.Remote != nil {
			// The cluster's: stored, or being written on other nodes. A recording this node
			// holds is listed as this node sees it.
			ctx, cancel := context.WithTimeout(sctx, remoteRecordingsWait)
			rs, err := c.opts.Remote.Recordings(ctx, c.opts.Principal, c.opts.Admin, p.Session)
			cancel()
			if err != nil {
				e := remoteError(err, p.Session)
				spanError(span, e)
				c.replyErr(req.ID, e)
				return
			}
			for _, r := range rs {
				if !seen[r.Recording] {
					seen[r.Recording] = true
					out.Recordings = append(out.Recordings, r)
				}
			}
			slices.SortStableFunc(out.Recordings, func(a, b proto.RecordingInfo) int { return cmp.Compare(a.Started, b.Started) })
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
	sctx, span := c.startSpan(otel.SpanRecordingRead, proto.MethodRecordingRead, p.Meta, 0)
	span.SetAttributes(attribute.String(otel.AttrRecordingID, p.Recording))
	c.slowSpan(req.ID, span, func() {
		data, size, err := c.reg.ReadRecording(p.Recording, c.opts.Principal, c.opts.Admin, p.Offset, p.Length)
		if errors.Is(err, session.ErrUnknownRecording) && c.opts.Remote != nil {
			// Not on this node's disk: being written on another node, or in the cluster's store.
			ctx, cancel := context.WithTimeout(sctx, remoteRecordingsWait)
			res, err := c.opts.Remote.ReadRecording(ctx, c.opts.Principal, c.opts.Admin, p)
			cancel()
			c.replyRemote(req.ID, span, p.Recording, res, err)
			return
		}
		if err != nil {
			e := sessionError(err, p.Recording)
			spanError(span, e)
			c.replyErr(req.ID, e)
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
