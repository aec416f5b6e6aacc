// Package otel sets up muxterm's OpenTelemetry tracer and meter providers from the standard
// OTEL_* environment, and names every span and instrument muxterm emits. Other packages use
// only the upstream API types (trace.Tracer, metric.Meter) and the names and the Instruments
// here. With no OTEL_* variable set and no Prometheus endpoint, telemetry is a no-op.
package otel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	upotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	promexp "go.opentelemetry.io/otel/exporters/prometheus"
	otelmetric "go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every tracer and meter.
const ScopeName = "muxterm"

// Span names.
const (
	SpanWSConnection  = "ws.connection"
	SpanSessionOpen   = "session.open"
	SpanSessionAttach = "session.attach"
	SpanSessionDetach = "session.detach"
	SpanSessionResize = "session.resize"
	SpanSessionSignal = "session.signal"
	SpanSessionLease  = "session.lease"
	SpanSessionList   = "session.list"
	// SpanSessionCapture: a session.capture, from the request to the screen read.
	SpanSessionCapture = "session.capture"
	SpanSessionKill    = "session.kill"
	SpanSessionReader  = "session.reader"
	SpanReaperSweep    = "reaper.sweep"
	// The other methods' request spans: each from the request to its answer.
	SpanInitialize        = "initialize"
	SpanSessionCloseStdin = "session.closeStdin"
	SpanRecordingList     = "recording.list"
	SpanRecordingRead     = "recording.read"
	SpanShareCreate       = "share.create"
	SpanShareList         = "share.list"
	SpanShareRevoke       = "share.revoke"
)

// Span events of session.kill.
const (
	EventSignalSent    = "signal.sent"
	EventChildReaped   = "child.reaped"
	EventEscapeesFound = "escapees.found"
	EventReaderBlocked = "reader.blocked"
	EventReaderEnded   = "reader.ended"
	EventCgroupKilled  = "cgroup.killed"
)

// Attribute keys muxterm defines (semantic conventions are used where one exists:
// process.pid, process.exit.code, rpc.method, session.id).
const (
	AttrSessionID   = "session.id"
	AttrSignal      = "muxterm.signal"
	AttrReason      = "muxterm.reason"
	AttrOutcome     = "muxterm.kill.outcome"
	AttrEscapees    = "muxterm.kill.escapees"
	AttrSurvivors   = "muxterm.kill.survivors"
	AttrCgroupProcs = "muxterm.cgroup.procs"
	// AttrReaderBlocked: whether the kill found the session's reader still blocked.
	AttrReaderBlocked = "muxterm.reader.blocked"
	AttrChannel       = "muxterm.channel"
	AttrSelected      = "muxterm.reaper.selected"
	AttrClaimed       = "muxterm.reaper.claimed"
	AttrLostReattach  = "muxterm.reaper.lost"
	AttrBytes         = "muxterm.bytes"
	// AttrScreenBytes: the length of the paint an attach starts with (0: a raw replay).
	AttrScreenBytes = "muxterm.screen.bytes"
	// AttrRecordingID and AttrRecordingOffset name a session's recording and the point in it,
	// in seconds from its start, at which a span ended (recording.read plays it from there).
	AttrRecordingID     = "muxterm.recording.id"
	AttrRecordingOffset = "muxterm.recording.offset_s"
	AttrClusterKind     = "muxterm.cluster.kind"
	// AttrUpgradeOutcome: refused, failed or adopted, on muxterm.upgrades.
	AttrUpgradeOutcome = "muxterm.upgrade.outcome"
	// AttrNodeState: alive or lost, on muxterm.cluster.nodes.
	AttrNodeState = "muxterm.node.state"
)

// Instrument names.
const (
	MetricKillDuration      = "muxterm.session.kill.duration"
	MetricSessions          = "muxterm.sessions"
	MetricViewers           = "muxterm.viewers"
	MetricSockets           = "muxterm.sockets"
	MetricBytesOut          = "muxterm.output.bytes"
	MetricBytesIn           = "muxterm.input.bytes"
	MetricGapBytes          = "muxterm.gap.bytes"
	MetricPauseDuration     = "muxterm.backpressure.pause.duration"
	MetricReaps             = "muxterm.reaps"
	MetricClaimsLost        = "muxterm.reaper.claims.lost"
	MetricUpgradesRejected  = "muxterm.upgrades.rejected"
	MetricConnsEvicted      = "muxterm.conns.evicted"
	MetricRecordDropped     = "muxterm.recording.dropped"
	MetricClusterUnverified = "muxterm.cluster.unverified"
	// MetricOpenDuration and MetricAttachDuration: from the request to its reply's being queued.
	MetricOpenDuration   = "muxterm.session.open.duration"
	MetricAttachDuration = "muxterm.session.attach.duration"
	// MetricReaperErrors: reaps whose teardown left survivors, could not verify, or ran out of
	// time, by reason.
	MetricReaperErrors = "muxterm.reaper.errors"
	// MetricFDReserveUsed: steps of kills run again on the descriptor reserve because the
	// descriptor table was full.
	MetricFDReserveUsed = "muxterm.fd.reserve.used"
	// MetricUpgrades: upgrades in place by outcome (refused: nothing changed; failed: this
	// image serves again; adopted: counted by the new image).
	MetricUpgrades = "muxterm.upgrades"
	// MetricClusterNodes: the other nodes of the cluster this node has heard of, by state
	// (alive, lost).
	MetricClusterNodes = "muxterm.cluster.nodes"
)

// Values of AttrReason on muxterm.reaper.errors, AttrUpgradeOutcome on muxterm.upgrades and AttrNodeState
// on muxterm.cluster.nodes.
const (
	ReaperErrSurvivors  = "survivors"
	ReaperErrUnverified = "unverified"
	ReaperErrTimeout    = "timeout"
	UpgradeRefused      = "refused"
	UpgradeFailed       = "failed"
	UpgradeAdopted      = "adopted"
	NodeAlive           = "alive"
	NodeLost            = "lost"
)

// Options configure Setup.
type Options struct {
	ServiceVersion string
	// Prometheus makes Setup create a Prometheus exporter whose handler serves /metrics.
	Prometheus bool
}

// Telemetry holds the providers, the instruments and, with Options.Prometheus, the /metrics
// handler. Its methods are safe for concurrent use.
type Telemetry struct {
	Tracer      oteltrace.Tracer
	Meter       otelmetric.Meter
	Instruments *Instruments
	// Metrics serves Prometheus text, or is nil.
	Metrics http.Handler

	shutdowns []func(context.Context) error
}

// Noop returns telemetry that records nothing.
func Noop() *Telemetry {
	m := metricnoop.NewMeterProvider().Meter(ScopeName)
	in, _ := NewInstruments(m)
	return &Telemetry{Tracer: tracenoop.NewTracerProvider().Tracer(ScopeName), Meter: m, Instruments: in}
}

// envSet reports whether any of the variables that turn exporting on is set.
func envSet(names ...string) bool {
	for _, n := range names {
		if os.Getenv(n) != "" {
			return true
		}
	}
	return false
}

// Setup builds providers from the standard environment: OTEL_TRACES_EXPORTER (otlp, console,
// none), OTEL_METRICS_EXPORTER (otlp, prometheus, console, none), OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, grpc), OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES and the OTEL_BSP_* batch variables. Traces are exported only when
// OTEL_TRACES_EXPORTER or an OTLP endpoint is set; metrics likewise, or when Prometheus is on.
// It also installs the W3C trace-context propagator globally.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	t := Noop()
	upotel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{}))
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceVersion(opts.ServiceVersion)))
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	if envOnly, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK()); err == nil {
		if merged, err := resource.Merge(res, envOnly); err == nil {
			res = merged
		}
	}
	if !envSet("OTEL_SERVICE_NAME") {
		if merged, err := resource.Merge(res, resource.NewSchemaless(semconv.ServiceName("muxterm"))); err == nil {
			res = merged
		}
	}

	if envSet("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("otel span exporter: %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
			t.Tracer = tp.Tracer(ScopeName)
			t.shutdowns = append(t.shutdowns, tp.Shutdown)
		}
	}

	var readers []sdkmetric.Reader
	if envSet("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("otel metric reader: %w", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			readers = append(readers, r)
		}
	}
	if opts.Prometheus {
		reg := prometheus.NewRegistry()
		exp, err := promexp.New(promexp.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("otel prometheus exporter: %w", err)
		}
		readers = append(readers, exp)
		// OpenMetrics when the scraper asks for it (Accept): the only exposition that carries
		// the histograms' exemplars (trace ids).
		t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	}
	if len(readers) > 0 {
		mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithView(latencyViews()...)}
		for _, r := range readers {
			mopts = append(mopts, sdkmetric.WithReader(r))
		}
		mp := sdkmetric.NewMeterProvider(mopts...)
		t.Meter = mp.Meter(ScopeName)
		in, err := NewInstruments(t.Meter)
		if err != nil {
			return nil, err
		}
		t.Instruments = in
		t.shutdowns = append(t.shutdowns, mp.Shutdown)
	}
	return t, nil
}

// latencyViews give the kill, open and attach latency histograms buckets that resolve
// milliseconds.
func latencyViews() []sdkmetric.View {
	var views []sdkmetric.View
	for _, name := range []string{MetricKillDuration, MetricOpenDuration, MetricAttachDuration} {
		views = append(views, sdkmetric.NewView(sdkmetric.Instrument{Name: name},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
				Boundaries: []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
			}}))
	}
	return views
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, s := range t.shutdowns {
		errs = append(errs, s(ctx))
	}
	return errors.Join(errs...)
}

// Instruments are muxterm's metrics. Every field is set; Noop().Instruments records nothing.
type Instruments struct {
	KillDuration      otelmetric.Float64Histogram   // seconds, by outcome
	Sessions          otelmetric.Int64UpDownCounter // sessions registered
	Viewers           otelmetric.Int64UpDownCounter // viewers attached
	Sockets           otelmetric.Int64UpDownCounter // sockets open
	BytesOut          otelmetric.Int64Counter       // PTY output bytes read
	BytesIn           otelmetric.Int64Counter       // input bytes written to PTYs
	GapBytes          otelmetric.Int64Counter       // bytes viewers lost to gaps
	PauseDuration     otelmetric.Float64Counter     // seconds readers were paused by backpressure
	Reaps             otelmetric.Int64Counter       // sessions reaped, by reason
	ClaimsLost        otelmetric.Int64Counter       // reaper claims lost to a reattach
	UpgradesRejected  otelmetric.Int64Counter       // refused upgrades, by reason
	ConnsEvicted      otelmetric.Int64Counter       // idle HTTP connections evicted, by reason
	RecordDropped     otelmetric.Int64Counter       // bytes recordings dropped (a slow or full disk)
	ClusterUnverified otelmetric.Int64Counter       // directory entries and heartbeats ignored, by kind
	OpenDuration      otelmetric.Float64Histogram   // seconds, session.open served here
	AttachDuration    otelmetric.Float64Histogram   // seconds, session.attach served here
	ReaperErrors      otelmetric.Int64Counter       // reaps that went wrong, by reason
	Upgrades          otelmetric.Int64Counter       // upgrades in place, by outcome
}

// NewInstruments creates the instruments on m.
func NewInstruments(m otelmetric.Meter) (*Instruments, error) {
	var in Instruments
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	in.KillDuration, err = m.Float64Histogram(MetricKillDuration, otelmetric.WithUnit("s"),
		otelmetric.WithDescription("Time from the kill point to the kill's return."))
	add(err)
	in.Sessions, err = m.Int64UpDownCounter(MetricSessions, otelmetric.WithUnit("{session}"),
		otelmetric.WithDescription("Sessions registered."))
	add(err)
	in.Viewers, err = m.Int64UpDownCounter(MetricViewers, otelmetric.WithUnit("{viewer}"),
		otelmetric.WithDescription("Viewers attached to sessions."))
	add(err)
	in.Sockets, err = m.Int64UpDownCounter(MetricSockets, otelmetric.WithUnit("{socket}"),
		otelmetric.WithDescription("WebSockets open."))
	add(err)
	in.BytesOut, err = m.Int64Counter(MetricBytesOut, otelmetric.WithUnit("By"),
		otelmetric.WithDescription("Bytes read from PTYs."))
	add(err)
	in.BytesIn, err = m.Int64Counter(MetricBytesIn, otelmetric.WithUnit("By"),
		otelmetric.WithDescription("Input bytes accepted for PTYs."))
	add(err)
	in.GapBytes, err = m.Int64Counter(MetricGapBytes, otelmetric.WithUnit("By"),
		otelmetric.WithDescription("Bytes viewers lost: they fell behind the ring, or attached from an offset it no longer held."))
	add(err)
	in.PauseDuration, err = m.Float64Counter(MetricPauseDuration, otelmetric.WithUnit("s"),
		otelmetric.WithDescription("Time PTY readers spent paused by backpressure."))
	add(err)
	in.Reaps, err = m.Int64Counter(MetricReaps, otelmetric.WithUnit("{session}"),
		otelmetric.WithDescription("Sessions reaped, by reason."))
	add(err)
	in.ClaimsLost, err = m.Int64Counter(MetricClaimsLost, otelmetric.WithUnit("{claim}"),
		otelmetric.WithDescription("Reaper claims lost to a reattach, lease or kill."))
	add(err)
	in.UpgradesRejected, err = m.Int64Counter(MetricUpgradesRejected, otelmetric.WithUnit("{request}"),
		otelmetric.WithDescription("WebSocket upgrades refused, by reason."))
	add(err)
	in.ConnsEvicted, err = m.Int64Counter(MetricConnsEvicted, otelmetric.WithUnit("{connection}"),
		otelmetric.WithDescription("Idle HTTP connections (not WebSockets) the gateway closed to make room, by reason."))
	add(err)
	in.RecordDropped, err = m.Int64Counter(MetricRecordDropped, otelmetric.WithUnit("By"),
		otelmetric.WithDescription("Bytes of output, input, markers or sizes left out of recordings because their disk was slow, stalled or full."))
	add(err)
	in.ClusterUnverified, err = m.Int64Counter(MetricClusterUnverified, otelmetric.WithUnit("{message}"),
		otelmetric.WithDescription("Cluster directory entries and heartbeats ignored because their signature does not verify, by kind."))
	add(err)
	in.OpenDuration, err = m.Float64Histogram(MetricOpenDuration, otelmetric.WithUnit("s"),
		otelmetric.WithDescription("Time from a session.open request to its reply (the spawn included)."))
	add(err)
	in.AttachDuration, err = m.Float64Histogram(MetricAttachDuration, otelmetric.WithUnit("s"),
		otelmetric.WithDescription("Time from a session.attach request to its reply (a paint included)."))
	add(err)
	in.ReaperErrors, err = m.Int64Counter(MetricReaperErrors, otelmetric.WithUnit("{session}"),
		otelmetric.WithDescription("Reaps whose teardown left survivors, could not check for them, or ran out of time, by reason."))
	add(err)
	in.Upgrades, err = m.Int64Counter(MetricUpgrades, otelmetric.WithUnit("{upgrade}"),
		otelmetric.WithDescription("Upgrades in place, by outcome."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otel instruments: %w", err)
	}
	// The counters an alert or a panel watches for rare events start at 0 for each of their
	// values, so a rate over them exists (and reads 0) before the first event rather than being
	// absent.
	ctx := context.Background()
	in.ClaimsLost.Add(ctx, 0)
	in.PauseDuration.Add(ctx, 0)
	for _, r := range []string{ReaperErrSurvivors, ReaperErrUnverified, ReaperErrTimeout} {
		in.ReaperErrors.Add(ctx, 0, otelmetric.WithAttributes(attribute.String(AttrReason, r)))
	}
	for _, o := range []string{UpgradeRefused, UpgradeFailed, UpgradeAdopted} {
		in.Upgrades.Add(ctx, 0, otelmetric.WithAttributes(attribute.String(AttrUpgradeOutcome, o)))
	}
	return &in, nil
}

// Observed are values read when the metrics are collected rather than recorded as they change.
type Observed struct {
	// FDReserveUses counts the kills' steps run again on the descriptor reserve.
	FDReserveUses func() int64
	// Nodes returns how many other nodes of the cluster are alive and lost; nil outside a
	// cluster.
	Nodes func() (alive, lost int)
}

// Observe registers o's callbacks on t's meter.
func (t *Telemetry) Observe(o Observed) error {
	var insts []otelmetric.Observable
	fd, err := t.Meter.Int64ObservableCounter(MetricFDReserveUsed, otelmetric.WithUnit("{step}"),
		otelmetric.WithDescription("Steps of kills run again on the descriptor reserve because the descriptor table was full."))
	if err != nil {
		return fmt.Errorf("otel %s: %w", MetricFDReserveUsed, err)
	}
	insts = append(insts, fd)
	var nodes otelmetric.Int64ObservableGauge
	if o.Nodes != nil {
		nodes, err = t.Meter.Int64ObservableGauge(MetricClusterNodes, otelmetric.WithUnit("{node}"),
			otelmetric.WithDescription("The other nodes of the cluster, by state (alive, lost)."))
		if err != nil {
			return fmt.Errorf("otel %s: %w", MetricClusterNodes, err)
		}
		insts = append(insts, nodes)
	}
	_, err = t.Meter.RegisterCallback(func(_ context.Context, obs otelmetric.Observer) error {
		obs.ObserveInt64(fd, o.FDReserveUses())
		if o.Nodes != nil {
			alive, lost := o.Nodes()
			obs.ObserveInt64(nodes, int64(alive), otelmetric.WithAttributes(attribute.String(AttrNodeState, NodeAlive)))
			obs.ObserveInt64(nodes, int64(lost), otelmetric.WithAttributes(attribute.String(AttrNodeState, NodeLost)))
		}
		return nil
	}, insts...)
	if err != nil {
		return fmt.Errorf("otel callbacks: %w", err)
	}
	return nil
}

// Seconds converts a duration for the histograms.
func Seconds(d time.Duration) float64 { return d.Seconds() }
