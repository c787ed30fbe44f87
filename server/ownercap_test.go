package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestOneConnectionCannotTakeEveryKey: one connection pipelining e on
// 1,024 distinct keys must not use up --max-locks for everyone. With the
// per-owner cap the flood is answered error_max_locks past its share and
// a bystander still locks.
func TestOneConnectionCannotTakeEveryKey(t *testing.T) {
	s := servertest.StartServer(t, func(*engine.Config, *server.Config) {})
	max := s.Engine.Config().MaxKeys
	attacker, bystander := dial(t, s.Addr), dial(t, s.Addr)
	var b strings.Builder
	for i := range max {
		fmt.Fprintf(&b, "e\nflood%d\n\n", i)
	}
	attacker.send(b.String())
	took, refused := 0, 0
	for range max {
		switch got := attacker.line(); {
		case strings.HasPrefix(got, "acquired "):
			took++
		case got == "error_max_locks":
			refused++
		default:
			t.Fatalf("attacker got %q", got)
		}
	}
	if want := s.Engine.Config().MaxKeysPerOwner; took != want || refused != max-want {
		t.Fatalf("attacker took %d keys and was refused %d, want %d and %d", took, refused, want, max-want)
	}
	grant(t, bystander.do("l", "bystander", "0"), "ok")
}
