package server_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// hotConn is one connection of a hot-key workload: prebuilt requests and a
// reader, so a round allocates nothing on the client side.
type hotConn struct {
	c   net.Conn
	br  *bufio.Reader
	acq []byte
	rel []byte
	key []byte
	cmd codec.Cmd // release command
	tok []byte
}

func dialHot(tb testing.TB, addr, key string, limit int) *hotConn {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	// One deadline for the connection's whole life: setting one per
	// request would allocate in the benchmark's loop.
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	h := &hotConn{c: c, br: bufio.NewReaderSize(c, 512), key: []byte(key), cmd: codec.CmdRelease,
		rel: make([]byte, 0, 128), tok: make([]byte, 0, 64)}
	if limit > 1 {
		h.cmd = codec.CmdSemRelease
		h.acq = codec.AppendRequest(nil, codec.CmdSemLock, h.key, []byte("30 "+strconv.Itoa(limit)))
	} else {
		h.acq = codec.AppendRequest(nil, codec.CmdLock, h.key, []byte("30"))
	}
	return h
}

// lock acquires and returns the grant's fence number.
func (h *hotConn) lock() (uint64, error) {
	if _, err := h.c.Write(h.acq); err != nil {
		return 0, err
	}
	line, err := h.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// "ok <token> <ttl>\n", parsed without allocating.
	rest, ok := bytes.CutPrefix(line, []byte("ok "))
	i := bytes.IndexByte(rest, ' ')
	if !ok || i < 0 {
		return 0, fmt.Errorf("acquire: %q", line)
	}
	h.tok = append(h.tok[:0], rest[:i]...)
	t, err := fence.Parse(h.tok)
	if err != nil {
		return 0, err
	}
	return t.Fence, nil
}

func (h *hotConn) unlock() error {
	h.rel = codec.AppendRequest(h.rel[:0], h.cmd, h.key, h.tok)
	if _, err := h.c.Write(h.rel); err != nil {
		return err
	}
	line, err := h.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if string(line) != "ok\n" {
		return fmt.Errorf("release: %q", line)
	}
	return nil
}

// TestHotKeyHandOffAcrossLoops runs many connections, spread over two
// event loops, on one key: grants cross loops both through direct writes
// to parked connections and through the loop's inbox (a connection that
// pipelined a request behind its wait), while other waiters disconnect.
// Every grant must come in fence order, to one holder at a time.
func TestHotKeyHandOffAcrossLoops(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) { hotKeyHandOff(t, direct) })
	}
}

func hotKeyHandOff(t *testing.T, direct bool) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) {
		c.EventLoops = 2
		c.DirectHandOff = direct
	})
	const conns, rounds = 16, 60
	var (
		holders atomic.Int32
		last    atomic.Uint64
		wg      sync.WaitGroup
		errs    = make(chan error, conns+4)
	)
	for i := range conns {
		h := dialHot(t, s.Addr, "hot", 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				f, err := h.lock()
				if err != nil {
					errs <- fmt.Errorf("conn %d: %w", i, err)
					return
				}
				if n := holders.Add(1); n != 1 {
					errs <- fmt.Errorf("conn %d: %d holders", i, n)
				}
				if prev := last.Swap(f); f <= prev {
					errs <- fmt.Errorf("conn %d: fence %d after %d", i, f, prev)
				}
				holders.Add(-1)
				if err := h.unlock(); err != nil {
					errs <- fmt.Errorf("conn %d: %w", i, err)
					return
				}
			}
		}()
	}
	// Waiters that leave while parked, and one that pipelines a stats
	// request behind its wait (so its grant must go through its loop).
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				c, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				if i == 0 {
					_, err = c.Write([]byte("l\nhot\n30\nstats\n_\n_\n"))
					br := bufio.NewReader(c)
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					var line []byte
					if err == nil {
						line, err = br.ReadSlice('\n')
					}
					if err == nil && !bytes.HasPrefix(line, []byte("ok ")) {
						err = fmt.Errorf("pipelined acquire: %q", line)
					}
					if err == nil {
						tok := bytes.Fields(line)[1]
						if line, err = br.ReadSlice('\n'); err == nil && !bytes.HasPrefix(line, []byte("ok {")) {
							err = fmt.Errorf("pipelined stats: %q", line)
						}
						_, _ = c.Write(codec.AppendRequest(nil, codec.CmdRelease, []byte("hot"), tok))
					}
					if err != nil {
						errs <- err
					}
				} else {
					_, _ = c.Write([]byte("l\nhot\n30\n"))
					time.Sleep(time.Millisecond)
				}
				_ = c.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// BenchmarkHotKey drives one key over real connections spread over two
// event loops: every op is an acquire that usually waits, then a release
// that hands the key to the oldest waiter, often on the other loop. The
// time per op is the server's hand-off rate with the clients in the same
// process (the clients' share is in it too).
func BenchmarkHotKey(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit int
	}{{"lock", 1}, {"sem4", 4}} {
		for _, conns := range []int{10, 200} {
			for _, direct := range []bool{true, false} {
				b.Run(fmt.Sprintf("%s/conns=%d/direct=%v", bc.name, conns, direct), func(b *testing.B) {
					benchHotKey(b, bc.limit, conns, direct)
				})
			}
		}
	}
}

// benchHotKey runs b.N acquire+release ops shared by conns connections.
func benchHotKey(b *testing.B, limit, conns int, direct bool) {
	s := servertest.StartServer(b, func(e *engine.Config, c *server.Config) {
		c.EventLoops = 2
		c.DirectHandOff = direct
		e.MaxWaiters = 0
	})
	hs := make([]*hotConn, conns)
	for i := range hs {
		hs[i] = dialHot(b, s.Addr, "hot", limit)
	}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for _, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := h.lock(); err != nil {
					failed.Store(err)
					return
				}
				if err := h.unlock(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}
