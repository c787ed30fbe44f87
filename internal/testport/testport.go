// Package testport hands tests free loopback addresses that no other test
// process on the machine is handed at the same time.
//
// A port checked free and closed again can be taken before the test binds
// it: by an outgoing connection (so ports come from below Linux's
// ephemeral range, 32768 and up) or by another test process that checked
// the same port (so each port handed out is claimed with an flock'd file
// held for the life of the process: `go test ./...` runs packages as
// separate processes at once).
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

const (
	lo, span = 20000, 12000 // 20000-31999
)

var (
	mu      sync.Mutex
	claimed = map[int]*os.File{} // held until the process exits
)

// Free returns a free 127.0.0.1:port address for tb, claimed for this
// process.
func Free(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), "latchd-test-ports")
	_ = os.MkdirAll(dir, 0o777)
	mu.Lock()
	defer mu.Unlock()
	for range 500 {
		port := lo + rand.IntN(span)
		if claimed[port] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			break // no lock directory: fall back on the check alone
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			_ = f.Close() // another test process holds it
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			_ = f.Close()
			continue
		}
		_ = ln.Close()
		claimed[port] = f
		return addr
	}
	for range 200 { // unclaimed, as before
		addr := fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(span))
		if ln, err := net.Listen("tcp", addr); err == nil {
			_ = ln.Close()
			return addr
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
