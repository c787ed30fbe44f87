package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// goBuild builds ./cmd/name into a temporary directory.
func goBuild(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	if b, err := exec.Command("go", "build", "-o", out, "../cmd/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, b)
	}
	return out
}

// liveServer is an in-process latchd as cmd/latchd wires it: engine, TCP
// server and REST server sharing one metrics registry, plus the cluster
// collector a cluster node registers (fed a fixed sample here).
type liveServer struct {
	tcp, http string
}

func startLive(t *testing.T) liveServer {
	t.Helper()
	var eng *engine.Engine // set below, before anything scrapes
	reg := metrics.NewRegistryFunc(func() *engine.Engine { return eng })
	reg.MustRegister(metrics.NewClusterCollector(func() metrics.ClusterSample {
		return metrics.ClusterSample{Role: "leader", Term: 2, CommitIndex: 10, AppliedIndex: 10, LastLogIndex: 10, LeaderChanges: 1}
	}))
	s := servertest.StartServerWith(t, []server.Option{server.WithMetrics(reg.TCP())})
	eng = s.Engine
	hcfg := httpfast.DefaultConfig()
	hcfg.Addr = "127.0.0.1:0"
	web, err := httpfast.New(hcfg, backend.NewLocal(s.Engine), zap.NewNop(), httpfast.WithMetrics(reg), httpfast.WithConnections(s.TCP.Connections))
	if err != nil {
		t.Fatal(err)
	}
	if err := web.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = web.Stop(ctx) // the test is over
	})
	return liveServer{tcp: s.Addr, http: web.Addr()}
}

// exposed scrapes url and returns every series name it can carry: each
// family's name, and _bucket, _sum, _count for histograms and summaries.
func exposed(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for name, f := range fams {
		names[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				names[name+suf] = true
			}
		}
	}
	return names
}

// metricName matches the metric names a query can name: latchd's own and
// the Go and process collectors' (Prometheus's own, such as up, are not
// latchd's to expose).
var metricName = regexp.MustCompile(`\b(?:latchd|go|process)_[a-zA-Z0-9_]+\b`)

// missing returns the metric names in exprs that are not in have.
func missing(exprs []string, have map[string]bool) []string {
	var out []string
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			if !have[n] && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// grafanaExprs returns every query of the dashboard, template variables
// included.
func grafanaExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("grafana/latchd.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("grafana/latchd.json: %v", err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// ruleExprs returns the expr of every rule in the alert rules file.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("prometheus/latchd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			out = append(out, strings.TrimSpace(e))
		}
	}
	if len(out) == 0 {
		t.Fatal("no expr in the alert rules")
	}
	return out
}

// Every metric the Grafana dashboard and the alert rules query is one a
// live server exposes.
func TestDashboardAndAlertsNameExposedMetrics(t *testing.T) {
	live := startLive(t)
	// Some traffic, so that every family has a sample.
	ctx := context.Background()
	conn, err := client.Dial(ctx, live.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g, err := conn.Acquire(ctx, "k", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Release(ctx, "k", g.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + live.http + "/v1/stats"); err != nil {
		t.Fatal(err)
	}
	have := exposed(t, "http://"+live.http+"/metrics")

	// The check itself must catch a wrong name.
	if m := missing([]string{`rate(latchd_no_such_metric_total[5m]) + latchd_held`}, have); !slices.Equal(m, []string{"latchd_no_such_metric_total"}) {
		t.Fatalf("missing() = %v, want the made-up name only", m)
	}
	for file, exprs := range map[string][]string{
		"grafana/latchd.json":          grafanaExprs(t),
		"prometheus/latchd-alerts.yml": ruleExprs(t),
	} {
		if len(exprs) == 0 {
			t.Fatalf("%s: no queries found", file)
		}
		if m := missing(exprs, have); len(m) > 0 {
			t.Errorf("%s queries metrics the server does not expose: %v", file, m)
		}
		if !slices.ContainsFunc(exprs, func(e string) bool { return metricName.MatchString(e) }) {
			t.Errorf("%s names no latchd metric at all", file)
		}
	}
}

// The systemd unit passes systemd-analyze verify, with no warning, and
// its hardening rates OK in systemd-analyze security.
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian: apt-get install systemd): the unit is not verified")
	}
	unit, err := os.ReadFile("systemd/latchd.service")
	if err != nil {
		t.Fatal(err)
	}
	bin := goBuild(t, "latchd")
	// verify checks that ExecStart's binary exists: point it at the
	// freshly built one.
	dir := t.TempDir()
	path := filepath.Join(dir, "latchd.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/latchd"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=true", "--no-pager", path).CombinedOutput()
	if err != nil {
		t.Skipf("systemd-analyze security --offline unsupported here: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for latchd.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	if lvl, _ := strconv.ParseFloat(string(m[1]), 64); lvl > 2.0 {
		t.Fatalf("exposure level %.1f, want <= 2.0 (OK):\n%s", lvl, out)
	}
	// The flags ExecStart passes must be ones latchd accepts.
	for line := range strings.Lines(string(unit)) {
		if args, ok := strings.CutPrefix(line, "ExecStart=/usr/local/bin/latchd "); ok {
			var o bytes.Buffer
			cmd := exec.Command(bin, append(strings.Fields(args), "--version")...)
			cmd.Stdout, cmd.Stderr = &o, &o
			if err := cmd.Run(); err != nil {
				t.Fatalf("latchd %s --version: %v\n%s", args, err, o.String())
			}
		}
	}
}

// The Dockerfile builds a static binary in a separate stage, runs as a
// non-root user, and its HEALTHCHECK command works against a live
// /healthz (the image has no curl: it is latchctl's own).
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	var from, user int
	var health []string
	for line := range strings.Lines(df) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "FROM "):
			from++
		case strings.HasPrefix(line, "USER "):
			user++
			if u := strings.TrimSpace(strings.TrimPrefix(line, "USER ")); u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
				t.Errorf("image runs as %q", u)
			}
		}
	}
	if from < 2 || user == 0 || !strings.Contains(df, "CGO_ENABLED=0") {
		t.Fatalf("want a multi-stage build (%d FROM), a USER (%d) and CGO_ENABLED=0", from, user)
	}
	m := regexp.MustCompile(`(?s)HEALTHCHECK[^\n]*\\\n\s*CMD (\[[^\]]*\])`).FindStringSubmatch(df)
	if m == nil {
		t.Fatal("no HEALTHCHECK CMD [...] in the Dockerfile")
	}
	if err := json.Unmarshal([]byte(m[1]), &health); err != nil {
		t.Fatalf("HEALTHCHECK CMD %s: %v", m[1], err)
	}
	if filepath.Base(health[0]) != "latchctl" || !strings.Contains(df, "/out/latchctl") {
		t.Fatalf("the health check runs %q, which the image must build", health[0])
	}
	// Run it against a live server, on its real REST port.
	live := startLive(t)
	bin := goBuild(t, "latchctl")
	args := slices.Clone(health[1:])
	for i, a := range args {
		args[i] = strings.Replace(a, "127.0.0.1:6389", live.http, 1)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("health check %v: %v\n%s", args, err, out.String())
	}
	// And it fails when nothing answers.
	args = slices.Clone(health[1:])
	for i, a := range args {
		args[i] = strings.Replace(a, "127.0.0.1:6389", "127.0.0.1:1", 1)
	}
	if err := exec.Command(bin, args...).Run(); err == nil {
		t.Fatal("health check passed with no server")
	}
}
