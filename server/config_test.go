package server_test

import (
	"runtime"
	"testing"

	"github.com/latchd/latchd/server"
)

func TestConfigLoops(t *testing.T) {
	c := server.DefaultConfig()
	c.EventLoops = 3
	if got := c.Loops(); got != 3 {
		t.Errorf("EventLoops 3: Loops() = %d", got)
	}
	c.EventLoops = 0
	want := max(1, runtime.GOMAXPROCS(0)-1)
	if got := c.Loops(); got != want {
		t.Errorf("EventLoops 0 with GOMAXPROCS %d: Loops() = %d, want %d", runtime.GOMAXPROCS(0), got, want)
	}
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	if got := c.Loops(); got != 1 {
		t.Errorf("EventLoops 0 with GOMAXPROCS 1: Loops() = %d, want 1", got)
	}
}
