package httpfast

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		path      string
		wantOp    op
		wantParam string
		wantAllow string
	}{
		{name: "acquire", method: "POST", path: "/v1/locks/k", wantOp: opLockAcquire, wantParam: "k"},
		{name: "release", method: "DELETE", path: "/v1/locks/k", wantOp: opLockRelease, wantParam: "k"},
		{name: "renew", method: "POST", path: "/v1/locks/k/renew", wantOp: opLockRenew, wantParam: "k"},
		{name: "key named renew", method: "POST", path: "/v1/locks/renew", wantOp: opLockAcquire, wantParam: "renew"},
		{name: "sem enqueue", method: "POST", path: "/v1/semaphores/a%20b/enqueue", wantOp: opSemEnqueue, wantParam: "a%20b"},
		{name: "sem wait", method: "POST", path: "/v1/semaphores/s/wait", wantOp: opSemWait, wantParam: "s"},
		{name: "sem release", method: "DELETE", path: "/v1/semaphores/s", wantOp: opSemRelease, wantParam: "s"},
		{name: "keepalive", method: "POST", path: "/v1/sessions/abc/keepalive", wantOp: opSessionKeepalive, wantParam: "abc"},
		{name: "session delete", method: "DELETE", path: "/v1/sessions/abc", wantOp: opSessionDelete, wantParam: "abc"},
		{name: "wrong method", method: "PATCH", path: "/v1/locks/k", wantOp: opBadMethod, wantAllow: "GET, POST, DELETE"},
		{name: "lowercase method", method: "post", path: "/v1/sessions", wantOp: opBadMethod, wantAllow: "POST"},
		{name: "unknown", method: "GET", path: "/v2/locks/k", wantOp: opNotFound},
		{name: "trailing slash", method: "POST", path: "/v1/locks/k/", wantOp: opNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, param, allow := match([]byte(tt.method), []byte(tt.path))
			if o != tt.wantOp || string(param) != tt.wantParam || allow != tt.wantAllow {
				t.Fatalf("match(%s %s) = %s, %q, %q; want %s, %q, %q", tt.method, tt.path,
					opNames[o], param, allow, opNames[tt.wantOp], tt.wantParam, tt.wantAllow)
			}
		})
	}
}

func TestDecodeKey(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		want   string
		wantOK bool
	}{
		{name: "plain", raw: "deploy-job", want: "deploy-job", wantOK: true},
		{name: "escaped slash", raw: "a%2Fb", want: "a/b", wantOK: true},
		{name: "utf-8", raw: "%C3%A9t%C3%A9", want: "été", wantOK: true},
		{name: "plus stays", raw: "a+b", want: "a+b", wantOK: true},
		{name: "256 bytes", raw: strings.Repeat("x", 256), want: strings.Repeat("x", 256), wantOK: true},
		{name: "257 bytes", raw: strings.Repeat("x", 257)},
		{name: "257 after decoding", raw: strings.Repeat("x", 256) + "%41"},
		{name: "empty", raw: ""},
		{name: "space", raw: "a%20b"},
		{name: "CR", raw: "a%0d"},
		{name: "raw tab", raw: "a\tb"},
		{name: "bad hex", raw: "%g0"},
		{name: "short escape", raw: "ab%4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf [maxKeyLen]byte
			got, ok := decodeKey(&buf, []byte(tt.raw))
			if ok != tt.wantOK || (ok && string(got) != tt.want) {
				t.Fatalf("decodeKey(%q) = %q, %v; want %q, %v", tt.raw, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"plain", `quote " and \ backslash`, "ctl \x00\x1f\n\t", "été ✓", "bad \xff utf8"} {
		var back string
		if err := json.Unmarshal(appendJSONString(nil, s), &back); err != nil {
			t.Fatalf("appendJSONString(%q) is not JSON: %v", s, err)
		}
		if want := strings.ToValidUTF8(s, "\ufffd"); back != want {
			t.Fatalf("round trip of %q = %q; want %q", s, back, want)
		}
	}
}

func TestAppendSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{33 * time.Second, "33"},
		{250 * time.Millisecond, "0.25"},
		{1500 * time.Millisecond, "1.5"},
	}
	for _, tt := range tests {
		if got := string(appendSeconds(nil, tt.d)); got != tt.want {
			t.Errorf("appendSeconds(%v) = %s; want %s", tt.d, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr bool
	}{
		{name: "default", mod: func(*Config) {}},
		{name: "empty addr", mod: func(c *Config) { c.Addr = "" }, wantErr: true},
		{name: "zero session TTL", mod: func(c *Config) { c.SessionTTL = 0 }, wantErr: true},
		{name: "negative rate", mod: func(c *Config) { c.RateLimitPerIP = -1 }, wantErr: true},
		{name: "rate without IP bound", mod: func(c *Config) { c.RateLimitPerIP = 5; c.RateLimitMaxIPs = 0 }, wantErr: true},
		{name: "tiny body limit", mod: func(c *Config) { c.MaxBodyBytes = 10 }, wantErr: true},
		{name: "negative default TTL", mod: func(c *Config) { c.DefaultTTL = -time.Second }, wantErr: true},
		{name: "zero read timeout", mod: func(c *Config) { c.ReadTimeout = 0 }, wantErr: true},
		{name: "negative max connections", mod: func(c *Config) { c.MaxConnections = -1 }, wantErr: true},
		{name: "negative max sessions", mod: func(c *Config) { c.MaxSessions = -1 }, wantErr: true},
		{name: "no session cap", mod: func(c *Config) { c.MaxSessions = 0 }},
		{name: "rate limit on", mod: func(c *Config) { c.RateLimitPerIP = 100; c.RateLimitBurst = 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			if err := c.Validate(); (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v; want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestRegistryForgetsDropped: names whose session the engine dropped behind the
// registry's back are forgotten by the sweeps of later creates, a few per
// create, and the names that stay still resolve.
func TestRegistryForgetsDropped(t *testing.T) {
	eng, err := engine.New(engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var r registry
	r.init(false)
	b := backend.NewLocal(eng)
	ids := make(map[string]engine.OwnerID)
	for range 100 {
		id, owner, err := r.create(b, time.Minute, 0, netip.Addr{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = owner
	}
	closed := 0
	for id, owner := range ids {
		if owner%2 == 0 {
			eng.CloseSession(0, owner) // as an expiry would
			delete(ids, id)
			closed++
		}
	}
	// Creates check two names each: 100 creates make 200 checks, enough
	// for the 100 names there were plus the 100 they add.
	for range 100 {
		id, owner, err := r.create(b, time.Minute, 0, netip.Addr{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = owner
	}
	if got, want := r.len(), 100-closed+100; got != want {
		t.Fatalf("registry holds %d names; want %d (the %d dropped sessions forgotten)", got, want, closed)
	}
	for id, owner := range ids {
		if got, ok := r.lookup(eng, []byte(id)); !ok || got != owner {
			t.Fatalf("lookup(%s) = %d, %v; want %d", id, got, ok, owner)
		}
	}
	if _, ok := r.remove(func() string {
		for id := range ids {
			return id
		}
		return ""
	}()); !ok {
		t.Fatal("remove of a live name failed")
	}
	if got := len(r.drain()); got != len(ids)-1 {
		t.Fatalf("drain returned %d owners; want %d", got, len(ids)-1)
	}
}
