package httpfast

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds a Chromium to drive: $LATCHD_CHROMIUM, else chromium
// (Debian's package, which .ci/run installs) or a Chrome on PATH.
func chromiumPath() string {
	if p := os.Getenv("LATCHD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for the test, or skips it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("no chromium on PATH (apt-get install chromium, or set LATCHD_CHROMIUM)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The browser lives as long as the context of the first run: start it
	// on bctx, then bound the test's steps with a timeout of their own.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rowJS evaluates to the holder cell's text of key's row, or "" when the
// page shows no row for key.
func rowJS(key string) string {
	k, _ := json.Marshal(key)
	return `(() => { const r = [...document.querySelectorAll("#keys tbody tr")].find(r => r.dataset.key === ` + string(k) +
		`); return r ? r.querySelector("td.holder").textContent : ""; })()`
}

// TestDashboardInBrowser loads /ui/ in headless Chromium with auth on,
// gives it the token through its prompt, takes a lock over TCP and
// waits for the key and its holder to appear, then releases it and waits
// for the row to go. With LATCHD_UI_SCREENSHOTS=dir it also saves
// screenshots there (see docs/dashboard.md).
func TestDashboardInBrowser(t *testing.T) {
	ctx := browser(t)
	const token = "s3cret-dash"
	h := startHTTP(t, func(c *Config) { c.AuthToken = token })
	auth := []string{"Authorization", "Bearer " + token}

	if err := chromedp.Do(ctx,
		chromedp.Navigate(h.base+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#auth button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("keys")),
	); err != nil {
		t.Fatalf("load the page and give it the token: %v", err)
	}

	const key = "dash/job-1"
	tcp := dialTCP(t, h.ts.Addr)
	tcp.send("l", key, "0")
	got := tcp.read()
	f := strings.Fields(got)
	if len(f) < 2 || f[0] != "ok" {
		t.Fatalf("tcp l = %q", got)
	}
	r := h.do(call{method: "GET", path: "/v1/locks/dash%2Fjob-1", hdr: auth})
	holders, _ := r.body["holders"].([]any)
	if r.status != http.StatusOK || len(holders) != 1 {
		t.Fatalf("GET the lock = %d %s", r.status, r.raw)
	}
	owner := holders[0].(map[string]any)["owner"].(string)

	poll := func(want string) error {
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](rowJS(key)+` === `+jsString(want),
			chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
		return err
	}
	shownNow := func() string {
		s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](rowJS(key)))
		return s
	}
	if err := poll(owner); err != nil {
		t.Fatalf("the page did not show %q held by %s (holder cell %q): %v", key, owner, shownNow(), err)
	}
	if dir := os.Getenv("LATCHD_UI_SCREENSHOTS"); dir != "" {
		screenshots(t, ctx, h, dir)
	}

	tcp.send("r", key, f[1])
	if got := tcp.read(); got != "ok" {
		t.Fatalf("tcp r = %q", got)
	}
	if err := poll(""); err != nil {
		t.Fatalf("the released key stayed on the page (holder cell %q): %v", shownNow(), err)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// screenshots fills the server with some traffic and saves the page:
// dashboard.png (the key list) and dashboard-key.png (one key's detail).
func screenshots(t *testing.T, ctx context.Context, h *harness, dir string) {
	t.Helper()
	for _, k := range []string{"orders/db-migrate", "billing/nightly", "cron/cleanup", "reports/export-42"} {
		c := dialTCP(t, h.ts.Addr)
		c.send("l", k, "0")
		c.read()
		for range len(k) % 4 {
			w := dialTCP(t, h.ts.Addr)
			w.send("l", k, "60") // queued behind the holder; answered only at cleanup
		}
	}
	for range 3 {
		c := dialTCP(t, h.ts.Addr)
		c.send("sl", "pool/workers", "0 4")
		c.read()
	}
	stop := traffic(t, h.ts.Addr, "billing/nightly")
	defer stop()
	shot := func(name string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), png, 0o644)
		}
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
	}
	shot("dashboard.png", chromedp.Sleep(2500*time.Millisecond)) // a few polls, so the rates have points
	shot("dashboard-key.png",
		chromedp.Click(chromedp.CSS(`#keys tbody tr[data-key="orders/db-migrate"] td.key`)),
		chromedp.WaitVisible(chromedp.ID("detail")),
		chromedp.Sleep(1200*time.Millisecond))
}

// traffic acquires and releases a lock in a loop over TCP, with a
// try-lock on the held key busy (a timeout) every tenth round, so the
// page's rates have something to show; stop ends it.
func traffic(t *testing.T, addr, busy string) (stop func()) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rd := make([]byte, 256)
		ask := func(cmd, key, arg string) string {
			if _, err := c.Write([]byte(cmd + "\n" + key + "\n" + arg + "\n")); err != nil {
				return ""
			}
			n, err := c.Read(rd)
			if err != nil {
				return ""
			}
			return strings.TrimSpace(string(rd[:n]))
		}
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			f := strings.Fields(ask("l", "hot/counter", "0"))
			if len(f) < 2 || f[0] != "ok" {
				return
			}
			ask("r", "hot/counter", f[1])
			if i%10 == 0 {
				ask("l", busy, "0")
			}
		}
	}()
	return func() { close(quit); wg.Wait(); c.Close() }
}

// TestDashboardClusterScreenshot saves dashboard-cluster.png: a
// follower's page in a 3-node cluster. It runs only with
// LATCHD_UI_SCREENSHOTS=<dir> (see docs/dashboard.md).
func TestDashboardClusterScreenshot(t *testing.T) {
	dir := os.Getenv("LATCHD_UI_SCREENSHOTS")
	if dir == "" {
		t.Skip("set LATCHD_UI_SCREENSHOTS=<dir> to take the cluster screenshot")
	}
	ctx := browser(t)
	rc := startRESTCluster(t, nil, 60*time.Second)
	lm, _ := rc.leader()
	for _, k := range []string{"orders/db-migrate", "billing/nightly", "cron/cleanup"} {
		c := dialTCP(t, lm.Addr)
		c.send("l", k, "0")
		c.read()
	}
	w := dialTCP(t, lm.Addr)
	w.send("l", "orders/db-migrate", "60")
	stop := traffic(t, lm.Addr, "billing/nightly")
	defer stop()
	f := rc.followers(lm)[0]
	if err := chromedp.Do(ctx,
		chromedp.Navigate(rc.h(f).base+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("cluster")),
		chromedp.Sleep(3*time.Second),
	); err != nil {
		t.Fatalf("load a follower's page: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "dashboard-cluster.png"), png, 0o644)
	}
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
}
