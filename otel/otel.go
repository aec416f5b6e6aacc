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
	// SpanSessionCapture: a session.capture, from the request to the screen read.
	SpanSessionCapture = "session.capture"
	SpanSessionKill    = "session.kill"
	SpanSessionReader  = "session.reader"
	SpanReaperSweep    = "reaper.sweep"
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
		t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if len(readers) > 0 {
		mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithView(killHistogramView())}
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

// killHistogramView gives kill latency buckets that resolve milliseconds.
func killHistogramView() sdkmetric.View {
	return sdkmetric.NewView(sdkmetric.Instrument{Name: MetricKillDuration},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
			Boundaries: []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}})
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
		otelmetric.WithDescription("Bytes viewers lost because they fell behind the ring."))
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
		otelmetric.WithDescription("Output and input bytes left out of recordings because their disk was slow, stalled or full."))
	in.ClusterUnverified, err = m.Int64Counter(MetricClusterUnverified, otelmetric.WithUnit("{message}"),
		otelmetric.WithDescription("Cluster directory entries and heartbeats ignored because their signature does not verify, by kind."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otel instruments: %w", err)
	}
	return &in, nil
}

// Seconds converts a duration for the histograms.
func Seconds(d time.Duration) float64 { return d.Seconds() }
