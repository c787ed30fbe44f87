package bench

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/server/servertest"
)

// startRedis starts redis-server on a free loopback port, or skips the
// test when it is not installed (apt-get install redis-server).
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH")
	}
	var out []byte
	if code := Main(context.Background(), []string{"freeport"}, writerFunc(func(b []byte) { out = append(out, b...) }), nil); code != 0 {
		t.Fatal("freeport failed")
	}
	p := strings.TrimSpace(string(out))
	if _, err := strconv.Atoi(p); err != nil {
		t.Fatalf("freeport printed %q", out)
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", p, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + p
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitListening(ctx, addr); err != nil {
		t.Fatal(err)
	}
	return addr
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func TestSweepRedis(t *testing.T) {
	addr := startRedis(t)
	srv := servertest.StartServer(t)
	for _, mode := range []Mode{ModeLock, ModeContended, ModeSem} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := tinyConfig(mode,
				Target{Name: "latchd", Kind: KindTCP, Addr: srv.Addr},
				Target{Name: "redis", Kind: KindRedis, Addr: addr})
			cfg.KeyPrefix = "r-" + string(mode)
			rs, err := Sweep(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, cfg, rs)
		})
	}
}
