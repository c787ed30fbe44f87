package bench

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEtcd answers the four gateway calls the etcd driver makes, and
// fails the test on an unlock of a key it did not hand out or a lock by
// an unknown lease.
type fakeEtcd struct {
	t      *testing.T
	mu     sync.Mutex
	leases map[string]bool
	held   map[string]string // lock key -> lease
	next   int
	locks  int
}

func (f *fakeEtcd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	switch r.URL.Path {
	case "/v3/lease/grant":
		id := strconv.Itoa(1000 + f.next)
		f.leases[id] = true
		_, _ = w.Write([]byte(`{"header":{"member_id":"1"},"ID":"` + id + `","TTL":"3600"}`))
	case "/v3/lock/lock":
		lease, _ := in["lease"].(string)
		if !f.leases[lease] || in["name"] == "" {
			f.t.Errorf("lock by lease %q name %v", lease, in["name"])
		}
		key := "k" + strconv.Itoa(f.next)
		f.held[key] = lease
		f.locks++
		_, _ = w.Write([]byte(`{"header":{},"key":"` + key + `"}`))
	case "/v3/lock/unlock":
		key, _ := in["key"].(string)
		if _, ok := f.held[key]; !ok {
			f.t.Errorf("unlock of %q, not held", key)
		}
		delete(f.held, key)
		_, _ = w.Write([]byte(`{"header":{}}`))
	case "/v3/lease/revoke":
		delete(f.leases, in["ID"].(string))
		_, _ = w.Write([]byte(`{"header":{}}`))
	default:
		http.NotFound(w, r)
	}
}

func TestEtcdDriver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeEtcd{t: t, leases: map[string]bool{}, held: map[string]string{}}
	srv := &http.Server{Handler: f}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	cfg := DefaultConfig()
	cfg.Rounds = 20
	target := Target{Name: "etcd", Kind: KindEtcd, Addr: ln.Addr().String()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg, target, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if res.Ops != 60 || res.Errors != 0 || f.locks != 60 {
		t.Fatalf("ops %d errors %d locks seen %d; want 60, 0, 60", res.Ops, res.Errors, f.locks)
	}
	if len(f.held) != 0 || len(f.leases) != 0 {
		t.Fatalf("after the run: %d locks held, %d leases left; want none", len(f.held), len(f.leases))
	}
}

func TestDiskMain(t *testing.T) {
	var out, errOut strings.Builder
	if err := diskMain(context.Background(), []string{"--dir", t.TempDir(), "--count", "5"}, &out, &errOut); err != nil {
		t.Fatal(err, errOut.String())
	}
	if got := out.String(); !strings.Contains(got, "p50") || !strings.Contains(got, "(5 writes)") || strings.Contains(got, "at once") {
		t.Fatalf("disk output %q", got)
	}
}

func TestDiskMainParallelAndPrealloc(t *testing.T) {
	var out, errOut strings.Builder
	args := []string{"--dir", t.TempDir(), "--count", "5", "--parallel", "3", "--prealloc"}
	if err := diskMain(context.Background(), args, &out, &errOut); err != nil {
		t.Fatal(err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"append+fdatasync in", "append+fdatasync, 3 files at once", "preallocated space in", "preallocated space, 3 files at once"}
	if len(lines) != len(want) {
		t.Fatalf("disk output %q: want %d lines", out.String(), len(want))
	}
	for i, w := range want {
		n := "(5 writes)"
		if strings.Contains(w, "at once") {
			n = "(15 writes)"
		}
		if !strings.Contains(lines[i], w) || !strings.Contains(lines[i], n) {
			t.Errorf("line %d %q: want %q and %q", i, lines[i], w, n)
		}
	}
}
