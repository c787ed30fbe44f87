package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/term"

	"github.com/latchd/latchd/client"
)

// row is one key of the stats table.
type row struct {
	key, kind          string
	holders, waiters   int
	limit              string
	leaseLeft, idleFor string
}

// rows flattens st into one list sorted by key; idle keys only with all.
func rows(st *client.Stats, all bool) []row {
	var out []row
	for _, l := range st.Locks {
		out = append(out, row{key: l.Key, kind: "lock", holders: 1, waiters: l.Waiters, limit: "1",
			leaseLeft: fmt.Sprintf("%.1fs", l.LeaseExpiresInS)})
	}
	for _, l := range st.RWLocks {
		out = append(out, row{key: l.Key, kind: "rw/" + cmp.Or(l.Mode, "free"), holders: l.Holders, waiters: l.Waiters,
			limit: "-", leaseLeft: "-"})
	}
	for _, s := range st.Semaphores {
		out = append(out, row{key: s.Key, kind: "sem", holders: s.Holders, waiters: s.Waiters,
			limit: strconv.Itoa(s.Limit), leaseLeft: "-"})
	}
	for _, d := range st.Delayed {
		if d.Limit == 1 { // a lock whose slot a lock-delay holds back: not in Locks
			out = append(out, row{key: d.Key, kind: "lock", waiters: d.Waiters, limit: "1",
				leaseLeft: fmt.Sprintf("delay %.1fs", d.EndsInS)})
		}
	}
	if all {
		for _, i := range st.IdleLocks {
			out = append(out, row{key: i.Key, kind: "lock", limit: "1", leaseLeft: "-", idleFor: fmt.Sprintf("%.1fs", i.IdleS)})
		}
		for _, i := range st.IdleSemaphores {
			out = append(out, row{key: i.Key, kind: "sem", limit: "-", leaseLeft: "-", idleFor: fmt.Sprintf("%.1fs", i.IdleS)})
		}
	}
	slices.SortFunc(out, func(a, b row) int { return cmp.Compare(a.key, b.key) })
	return out
}

func writeTable(w io.Writer, rs []row, all bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hdr := "KEY\tKIND\tHOLDERS\tWAITERS\tLIMIT\tLEASE LEFT"
	if all {
		hdr += "\tIDLE"
	}
	fmt.Fprintln(tw, hdr)
	for _, r := range rs {
		line := fmt.Sprintf("%s\t%s\t%d\t%d\t%s\t%s", r.key, r.kind, r.holders, r.waiters, r.limit, r.leaseLeft)
		if all {
			line += "\t" + cmp.Or(r.idleFor, "-")
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func runStats(fs *flag.FlagSet, c *common, args []string, stdout io.Writer) error {
	asJSON := fs.Bool("json", false, "print the server's report as JSON")
	all := fs.Bool("all", false, "list idle keys too")
	consistent := fs.Bool("consistent", false, "read a state confirmed current: on a cluster node, every change acknowledged before the call (fails when the node cannot confirm it)")
	if err := parseNoArgs("stats", fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.dialTimeout+client.DefaultIOTimeout)
	defer cancel()
	q, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = q.Close() }() // nothing held: nothing to lose
	read := q.Stats
	if *consistent {
		read = q.ConsistentStats
	}
	st, err := read(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprintf(stdout, "connections: %d  held locks: %d  semaphores in use: %d  read-write locks in use: %d  idle keys: %d\n\n",
		st.Connections, len(st.Locks), len(st.Semaphores), len(st.RWLocks), len(st.IdleLocks)+len(st.IdleSemaphores))
	return writeTable(stdout, rows(st, *all), *all)
}

// counterNames are the engine counters top turns into rates.
var counterNames = []struct{ metric, label string }{
	{"latchd_grants_total", "grants"},
	{"latchd_releases_total", "releases"},
	{"latchd_renewals_total", "renewals"},
	{"latchd_timeouts_total", "timeouts"},
	{"latchd_expiries_total", "expiries"},
}

// scrape reads the counters top shows from a Prometheus /metrics URL.
func scrape(ctx context.Context, hc *http.Client, url, token string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	out := make(map[string]float64, len(counterNames))
	for _, n := range counterNames {
		if f, ok := fams[n.metric]; ok && len(f.GetMetric()) > 0 {
			out[n.metric] = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return out, nil
}

func (c *common) httpClient() (*http.Client, error) {
	cfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, Timeout: c.dialTimeout + client.DefaultIOTimeout}, nil
}

func runTop(fs *flag.FlagSet, c *common, args []string, stdout io.Writer) error {
	interval := time.Second
	fs.Var((*seconds)(&interval), "interval", "time between refreshes")
	metricsURL := fs.String("metrics-url", os.Getenv("LATCHD_METRICS_URL"), "the server's Prometheus endpoint (http://host:port/metrics), for ops/s (env LATCHD_METRICS_URL)")
	limit := fs.Int("limit", 20, "keys to show")
	once := fs.Bool("once", false, "print one frame and exit (with --metrics-url, after two scrapes one interval apart)")
	if err := parseNoArgs("top", fs, args); err != nil {
		return err
	}
	if interval <= 0 {
		return usagef("--interval must be > 0")
	}
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	q, err := c.dial(dctx)
	cancel()
	if err != nil {
		return err
	}
	defer func() { _ = q.Close() }() // nothing held
	f, ok := stdout.(*os.File)
	tty := ok && term.IsTerminal(int(f.Fd()))
	var (
		prev     map[string]float64
		prevTime time.Time
	)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for frame := 0; ; frame++ {
		var (
			cur  map[string]float64
			merr error
		)
		now := time.Now()
		if *metricsURL != "" {
			cur, merr = scrape(ctx, hc, *metricsURL, c.authToken)
		}
		st, err := q.Stats(ctx)
		if ctx.Err() != nil {
			return nil // Ctrl-C
		}
		if err != nil {
			return err
		}
		if !*once || *metricsURL == "" || frame > 0 { // --once with rates needs a second scrape
			var b strings.Builder
			if tty && !*once {
				b.WriteString("\x1b[H\x1b[2J") // home, clear screen
			}
			writeTop(&b, c, st, cur, prev, now.Sub(prevTime), merr, *metricsURL != "", *limit, now)
			if _, err := io.WriteString(stdout, b.String()); err != nil {
				return err
			}
			if *once {
				return nil
			}
		}
		prev, prevTime = cur, now
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func writeTop(w io.Writer, c *common, st *client.Stats, cur, prev map[string]float64, dt time.Duration,
	merr error, haveURL bool, limit int, now time.Time) {
	rs := rows(st, false)
	held, waiting := 0, 0
	for _, r := range rs {
		held += r.holders
		waiting += r.waiters
	}
	fmt.Fprintf(w, "latchctl top  %s  %s\n", strings.Join(c.targets(), ","), now.Format("15:04:05"))
	fmt.Fprintf(w, "connections %d  keys in use %d  held %d  waiting %d  idle keys %d\n",
		st.Connections, len(st.Locks)+len(st.Semaphores)+len(st.RWLocks), held, waiting, len(st.IdleLocks)+len(st.IdleSemaphores))
	switch {
	case !haveURL:
		fmt.Fprintln(w, "ops/s: give --metrics-url http://HOST:PORT/metrics to see rates")
	case merr != nil:
		fmt.Fprintf(w, "ops/s: %v\n", merr)
	case prev == nil || dt <= 0:
		fmt.Fprintln(w, "ops/s: measuring...")
	default:
		parts := make([]string, 0, len(counterNames))
		for _, n := range counterNames {
			rate := (cur[n.metric] - prev[n.metric]) / dt.Seconds()
			parts = append(parts, fmt.Sprintf("%s %.0f", n.label, max(rate, 0)))
		}
		fmt.Fprintf(w, "ops/s: %s\n", strings.Join(parts, "  "))
	}
	fmt.Fprintln(w)
	// Busiest first: most waiters, then most holders, then key.
	slices.SortStableFunc(rs, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.waiters, a.waiters), cmp.Compare(b.holders, a.holders))
	})
	if len(rs) > limit {
		rs = rs[:limit]
	}
	_ = writeTable(w, rs, false) // w is a strings.Builder
}

func runHealth(fs *flag.FlagSet, c *common, args []string, stdout io.Writer) error {
	httpURL := fs.String("http", "", "check this URL instead (e.g. http://127.0.0.1:6389/healthz): healthy when it answers 200")
	if err := parseNoArgs("health", fs, args); err != nil {
		return err
	}
	if *httpURL != "" {
		hc, err := c.httpClient()
		if err != nil {
			return err
		}
		start := time.Now()
		req, err := http.NewRequest(http.MethodGet, *httpURL, nil)
		if err != nil {
			return usagef("--http: %v", err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close() // only the status matters
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: unhealthy: %s", *httpURL, resp.Status)
		}
		fmt.Fprintf(stdout, "%s: ok (%v)\n", *httpURL, time.Since(start).Round(time.Millisecond))
		return nil
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	// Every node of a cluster on its own: a health check is about each.
	targets := c.targets()
	bad := 0
	for _, addr := range targets {
		start := time.Now()
		if err := ping(addr, c.dialTimeout+client.DefaultIOTimeout, opts); err != nil {
			fmt.Fprintf(stdout, "%s: unhealthy: %v\n", addr, err)
			bad++
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%v)\n", addr, time.Since(start).Round(time.Millisecond))
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d servers unhealthy", bad, len(targets))
	}
	return nil
}

// ping connects to addr (TLS and auth as configured) and runs one stats
// round trip.
func ping(addr string, timeout time.Duration, opts []client.Option) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := client.Dial(ctx, addr, opts...)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // nothing held
	_, err = conn.Stats(ctx)
	return err
}
