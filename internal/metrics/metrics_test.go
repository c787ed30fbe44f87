package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

const secretKey = "secret-key-xyz"

func newTestEngine(t *testing.T) *engine.Engine {
	t.Helper()
	eng, err := engine.New(engine.DefaultConfig())
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	return eng
}

// scrape renders r and parses it back, failing on anything a Prometheus
// server would reject.
func scrape(t *testing.T, r *Registry) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	var buf bytes.Buffer
	n, err := r.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("scrape does not parse: %v\n%s", err, buf.String())
	}
	return buf.String(), mfs
}

// value returns the value of the series of family name whose labels
// include want, or fails.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no family %s", name)
	}
next:
	for _, m := range mf.Metric {
		for k, v := range want {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	t.Fatalf("family %s has no series with labels %v", name, want)
	return nil
}

func TestScrapeFamiliesAndTypes(t *testing.T) {
	eng := newTestEngine(t)
	r := NewRegistry(eng)
	route := r.HTTP().Route("lock_acquire")
	route.Observe(0.002)
	r.HTTP().Code("200").Inc()
	text, mfs := scrape(t, r)
	tests := []struct {
		name string
		typ  dto.MetricType
	}{
		{name: "latchd_tcp_connections", typ: dto.MetricType_GAUGE},
		{name: "latchd_http_sessions", typ: dto.MetricType_GAUGE},
		{name: "latchd_keys", typ: dto.MetricType_GAUGE},
		{name: "latchd_held", typ: dto.MetricType_GAUGE},
		{name: "latchd_waiters", typ: dto.MetricType_GAUGE},
		{name: "latchd_last_fence", typ: dto.MetricType_GAUGE},
		{name: "latchd_grants_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_releases_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_renewals_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_timeouts_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_expiries_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_dropped_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_pruned_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_tcp_requests_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_tcp_request_duration_seconds", typ: dto.MetricType_HISTOGRAM},
		{name: "latchd_tcp_protocol_errors_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_tcp_connections_refused_total", typ: dto.MetricType_COUNTER},
		{name: "latchd_http_request_duration_seconds", typ: dto.MetricType_HISTOGRAM},
		{name: "latchd_http_responses_total", typ: dto.MetricType_COUNTER},
		{name: "go_goroutines", typ: dto.MetricType_GAUGE},
		{name: "process_cpu_seconds_total", typ: dto.MetricType_COUNTER},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mf := mfs[tt.name]
			if mf == nil {
				t.Fatalf("scrape lacks family %s", tt.name)
			}
			if mf.GetType() != tt.typ {
				t.Fatalf("%s has type %v; want %v", tt.name, mf.GetType(), tt.typ)
			}
			if !strings.Contains(text, "# TYPE "+tt.name+" ") {
				t.Fatalf("scrape lacks a TYPE line for %s", tt.name)
			}
		})
	}
	// Histograms are classic ones, with le buckets ending in +Inf.
	for _, want := range []string{
		`latchd_tcp_request_duration_seconds_bucket{cmd="l",le="1e-05"} 0`,
		`latchd_tcp_request_duration_seconds_bucket{cmd="l",le="30"} 0`,
		`latchd_tcp_request_duration_seconds_bucket{cmd="sw",le="+Inf"} 0`,
		`latchd_http_request_duration_seconds_bucket{route="lock_acquire",le="0.001"} 0`,
		`latchd_http_request_duration_seconds_bucket{route="lock_acquire",le="0.0025"} 1`,
		`latchd_http_request_duration_seconds_count{route="lock_acquire"} 1`,
		`latchd_http_responses_total{code="200"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("scrape lacks line %q", want)
		}
	}
	if strings.Contains(text, "vmrange") {
		t.Errorf("scrape has VictoriaMetrics vmrange buckets")
	}
}

func TestEngineValues(t *testing.T) {
	eng := newTestEngine(t)
	r := NewRegistry(eng)
	r.TCP().Opened()
	r.TCP().Opened()
	r.TCP().Opened()
	r.TCP().Closed()
	out, err := eng.Acquire(0, engine.AcquireReq{Key: []byte(secretKey), Owner: 1, Limit: 1, TTL: time.Minute}, nil)
	if err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire = %+v, %v; want a grant", out, err)
	}
	if _, err := eng.Acquire(0, engine.AcquireReq{Key: []byte(secretKey), Owner: 2, Limit: 1, TTL: time.Minute, Timeout: time.Minute}, nilSink{}); err != nil {
		t.Fatalf("queued Acquire: %v", err)
	}
	if _, err := eng.Acquire(0, engine.AcquireReq{Key: []byte(secretKey + "-sem"), Owner: 3, Limit: 3, TTL: time.Minute}, nil); err != nil {
		t.Fatalf("semaphore Acquire: %v", err)
	}
	text, mfs := scrape(t, r)
	tests := []struct {
		name string
		want float64
	}{
		{name: "latchd_tcp_connections", want: 2},
		{name: "latchd_keys", want: 2},
		{name: "latchd_held", want: 2},
		{name: "latchd_waiters", want: 1},
		{name: "latchd_grants_total", want: 2},
		{name: "latchd_releases_total", want: 0},
		{name: "latchd_last_fence", want: float64(eng.LastFence())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := value(t, mfs, tt.name, nil)
			got := m.GetGauge().GetValue()
			if m.Counter != nil {
				got = m.GetCounter().GetValue()
			}
			if got != tt.want {
				t.Fatalf("%s = %v; want %v", tt.name, got, tt.want)
			}
		})
	}
	if eng.LastFence() == 0 {
		t.Fatalf("LastFence = 0 after two grants")
	}
	if strings.Contains(text, secretKey) {
		t.Fatalf("a key appears in the scrape:\n%s", text)
	}
}

type nilSink struct{}

func (nilSink) Deliver(engine.Outcome) {}

func TestTCPRecording(t *testing.T) {
	r := NewRegistry(nil)
	m := r.TCP()
	m.Request(codec.CmdLock)
	m.Request(codec.CmdLock)
	m.Request(codec.CmdStats)
	m.Answered(codec.CmdLock, int64(2*time.Millisecond))
	m.Answered(codec.CmdLock, int64(20*time.Second))
	m.ProtocolError(ReasonBadInt)
	m.ProtocolError(ReasonReadTimeout)
	m.ProtocolError(Reason(200)) // out of range: counted as other
	m.Refused(RefusedMaxConnectionsPerIP)
	// Out-of-range commands are ignored, not a panic.
	m.Request(codec.CmdInvalid)
	m.Request(codec.Cmd(200))
	m.Answered(codec.Cmd(200), 1)
	m.Refused(Refusal(200))

	text, mfs := scrape(t, r)
	counters := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{name: "latchd_tcp_requests_total", labels: map[string]string{"cmd": "l"}, want: 2},
		{name: "latchd_tcp_requests_total", labels: map[string]string{"cmd": "stats"}, want: 1},
		{name: "latchd_tcp_requests_total", labels: map[string]string{"cmd": "r"}, want: 0},
		{name: "latchd_tcp_protocol_errors_total", labels: map[string]string{"reason": "bad_int"}, want: 1},
		{name: "latchd_tcp_protocol_errors_total", labels: map[string]string{"reason": "read_timeout"}, want: 1},
		{name: "latchd_tcp_protocol_errors_total", labels: map[string]string{"reason": "other"}, want: 1},
		{name: "latchd_tcp_protocol_errors_total", labels: map[string]string{"reason": "auth"}, want: 0},
		{name: "latchd_tcp_connections_refused_total", labels: map[string]string{"reason": "max_connections_per_ip"}, want: 1},
		{name: "latchd_tcp_connections_refused_total", labels: map[string]string{"reason": "max_connections"}, want: 0},
	}
	for _, tt := range counters {
		if got := value(t, mfs, tt.name, tt.labels).GetCounter().GetValue(); got != tt.want {
			t.Errorf("%s%v = %v; want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	h := value(t, mfs, "latchd_tcp_request_duration_seconds", map[string]string{"cmd": "l"}).GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 20 || h.GetSampleSum() > 20.01 {
		t.Fatalf("l histogram count %d sum %v; want 2, ~20.002", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, want := range []string{
		`latchd_tcp_request_duration_seconds_bucket{cmd="l",le="0.001"} 0`,
		`latchd_tcp_request_duration_seconds_bucket{cmd="l",le="0.0025"} 1`,
		`latchd_tcp_request_duration_seconds_bucket{cmd="l",le="10"} 1`,
		`latchd_tcp_request_duration_seconds_bucket{cmd="l",le="30"} 2`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("scrape lacks line %q", want)
		}
	}
	// Every command label is a wire command name; no empty or numeric one.
	for _, mt := range mfs["latchd_tcp_requests_total"].Metric {
		name := mt.Label[0].GetValue()
		if name == "" || strings.ContainsAny(name, "0123456789") {
			t.Errorf("unexpected cmd label %q", name)
		}
	}
	if n := len(mfs["latchd_tcp_requests_total"].Metric); n != int(codec.CmdLast) {
		t.Errorf("%d cmd series; want %d", n, codec.CmdLast)
	}
}

func TestBucketsSorted(t *testing.T) {
	for i := 1; i < len(Buckets); i++ {
		if Buckets[i] <= Buckets[i-1] {
			t.Fatalf("Buckets not increasing at %d: %v", i, Buckets)
		}
	}
	if Buckets[0] > 50e-6 || Buckets[len(Buckets)-1] < 30 {
		t.Fatalf("Buckets %v do not span 50µs..30s", Buckets)
	}
}

// TestRefusalsAndExactFence: refusals at MaxKeys and MaxWaiters are
// counted per cap, and the fence's two 32-bit halves give it back
// exactly where latchd_last_fence (a float64) rounds it.
func TestRefusalsAndExactFence(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.MaxKeys, cfg.MaxWaiters = 1, 1
	cfg.FenceSeed = 1<<60 + 12345 // not a float64 exactly
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(eng)
	req := func(key string, owner engine.OwnerID) error {
		_, err := eng.Acquire(0, engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: time.Minute, Timeout: time.Minute}, nilSink{})
		return err
	}
	if err := req("a", 1); err != nil {
		t.Fatal(err)
	}
	if err := req("a", 2); err != nil { // the one waiter allowed
		t.Fatal(err)
	}
	if err := req("a", 3); err != engine.ErrMaxWaiters {
		t.Fatalf("third on a: %v; want ErrMaxWaiters", err)
	}
	for o := range engine.OwnerID(2) {
		if err := req("b", 10+o); err != engine.ErrMaxKeys {
			t.Fatalf("b: %v; want ErrMaxKeys", err)
		}
	}
	_, mfs := scrape(t, r)
	if got := value(t, mfs, "latchd_refused_total", map[string]string{"limit": "max_locks"}).GetCounter().GetValue(); got != 2 {
		t.Fatalf("refused max_locks = %v; want 2", got)
	}
	if got := value(t, mfs, "latchd_refused_total", map[string]string{"limit": "max_waiters"}).GetCounter().GetValue(); got != 1 {
		t.Fatalf("refused max_waiters = %v; want 1", got)
	}
	hi := value(t, mfs, "latchd_last_fence_high32", nil).GetGauge().GetValue()
	lo := value(t, mfs, "latchd_last_fence_low32", nil).GetGauge().GetValue()
	if got, want := uint64(hi)<<32|uint64(lo), eng.LastFence(); got != want || want != 1<<60+12346 {
		t.Fatalf("high32<<32|low32 = %d; want LastFence %d (= seed + 1)", got, want)
	}
	if f := value(t, mfs, "latchd_last_fence", nil).GetGauge().GetValue(); uint64(f) == eng.LastFence() {
		t.Fatalf("latchd_last_fence = %v is exact: the test needs a fence a float64 rounds", f)
	}
}
