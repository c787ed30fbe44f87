package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/latchd/latchd/server/servertest"
)

// TestSweepMux: a mux target runs every op of its rows beside the plain
// target, in each mode it supports, and refuses the others.
func TestSweepMux(t *testing.T) {
	srv := servertest.StartServer(t)
	for _, mode := range []Mode{ModeLock, ModeContended, ModeSem} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := tinyConfig(mode, Target{Name: "latchd", Kind: KindTCP, Addr: srv.Addr},
				Target{Name: "latchd-mux2", Kind: KindMux, Addr: srv.Addr})
			cfg.Mux = 2
			cfg.KeyPrefix = "m-" + string(mode)
			rs, err := Sweep(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, cfg, rs)
		})
	}
	cfg := tinyConfig(ModeTwoPhase, Target{Name: "m", Kind: KindMux, Addr: srv.Addr})
	if err := cfg.Validate(); err == nil {
		t.Fatal("a mux target in twophase mode validated")
	}
}

// TestParseMux: --mux N adds the server's muxed target after its plain one.
func TestParseMux(t *testing.T) {
	o, err := ParseArgs([]string{"--mux", "2", "--compare", "ceiling=tcp://127.0.0.1:7000"}, new(strings.Builder))
	if err != nil {
		t.Fatal(err)
	}
	ts := o.Config.Targets
	if len(ts) != 3 || ts[1].Kind != KindMux || ts[1].Name != "latchd-mux2" || ts[1].Addr != ts[0].Addr || o.Config.Mux != 2 {
		t.Fatalf("targets %+v, mux %d", ts, o.Config.Mux)
	}
}
