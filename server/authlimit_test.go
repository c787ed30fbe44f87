package server_test

import (
	"strings"
	"testing"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestAuthFailuresRateLimited: a failed auth closes the connection; past
// AuthFailuresPerMinute failures from one IP, even the right secret is
// answered error_auth and closed without being compared, and each such
// refusal is counted.
func TestAuthFailuresRateLimited(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	s := servertest.StartServerWith(t, []server.Option{server.WithMetrics(reg.TCP())},
		func(_ *engine.Config, c *server.Config) { c.AuthToken = "s3cret"; c.AuthFailuresPerMinute = 3 })
	for i := range 3 {
		c := dial(t, s.Addr)
		if got := c.do("auth", "_", "nope"); got != "error_auth" {
			t.Fatalf("wrong secret %d: %q; want error_auth", i, got)
		}
		c.closed()
	}
	c := dial(t, s.Addr)
	if got := c.do("auth", "_", "s3cret"); got != "error_auth" {
		t.Fatalf("right secret past the limit: %q; want error_auth", got)
	}
	c.closed()
	if got := counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", "auth_rate_limited"); got != 1 {
		t.Errorf("protocol errors{reason=auth_rate_limited} = %v; want 1", got)
	}
	if got := counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", "auth"); got != 3 {
		t.Errorf("protocol errors{reason=auth} = %v; want 3", got)
	}
}

// TestAuthSecretTooLong: the server refuses a secret no auth line can
// carry (over 256 bytes, or with a line break).
func TestAuthSecretTooLong(t *testing.T) {
	for _, tok := range []string{strings.Repeat("s", 257), "a\nb", "a\rb"} {
		c := server.DefaultConfig()
		c.AuthToken = tok
		if err := c.Validate(); err == nil {
			t.Errorf("Validate accepted a %d-byte secret %.10q", len(tok), tok)
		}
	}
	c := server.DefaultConfig()
	c.AuthToken = strings.Repeat("s", 256)
	if err := c.Validate(); err != nil {
		t.Errorf("Validate refused a 256-byte secret: %v", err)
	}
}
