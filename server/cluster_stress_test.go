package server_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// rawConn is a client usable from any goroutine: errors come back.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func rawDial(addr string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReader(c)}, nil
}

func (r *rawConn) do(cmd, key, arg string) (string, error) {
	_ = r.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.c.Write([]byte(cmd + "\n" + key + "\n" + arg + "\n")); err != nil {
		return "", err
	}
	s, err := r.br.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

// TestClusterHandOffStress: on a cluster leader, holders and waiters of
// one hot key (answers and grants written by the replica's goroutines
// straight to idle sockets), and connections that close while queued,
// keep mutual exclusion and get exactly their answers.
//
// With one event loop the leader writes its answers as a task on the
// loop (answers.go; the etcd build); with two, from the goroutine that
// applied them.
func TestClusterHandOffStress(t *testing.T) {
	for _, loops := range []int{1, 2} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) { clusterHandOffStress(t, loops) })
	}
}

func clusterHandOffStress(t *testing.T, loops int) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{ServerEdit: func(sc *server.Config) { sc.EventLoops = loops }})
	li := c.Leader(servertest.LeaderTimeout)
	addr := c.Members()[li].Addr

	var holders atomic.Int32
	var grants atomic.Int64
	var maxReleased atomic.Uint64 // the highest fence released so far
	errs := make(chan error, 64)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := rawDial(addr)
			if err != nil {
				errs <- err
				return
			}
			defer r.c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				line, err := r.do("l", "hot", "10 30")
				if err != nil {
					errs <- fmt.Errorf("worker %d lock: %v (%q)", w, err, line)
					return
				}
				f := strings.Fields(line)
				if len(f) != 3 || f[0] != "ok" {
					errs <- fmt.Errorf("worker %d lock: %q", w, line)
					return
				}
				// A grant's fence must be above every fence released
				// before it, as in the engine's concurrency test; read
				// once granted, since nobody releases while this worker
				// holds. A stale or reused token is not.
				fn, err := fence.FenceOf(f[1])
				if last := maxReleased.Load(); err != nil || fn <= last {
					errs <- fmt.Errorf("worker %d: granted fence %d (%v) after fence %d was released", w, fn, err, last)
				}
				// Hold across a renewal's round trip (a raft commit), so
				// that a second grant would overlap this one.
				if h := holders.Add(1); h != 1 {
					errs <- fmt.Errorf("worker %d: %d holders at once", w, h)
				}
				if line, err := r.do("n", "hot", f[1]+" 30"); err != nil || !strings.HasPrefix(line, "ok") {
					errs <- fmt.Errorf("worker %d renew: %q, %v", w, line, err)
					return
				}
				if h := holders.Load(); h != 1 {
					errs <- fmt.Errorf("worker %d: %d holders at once", w, h)
				}
				grants.Add(1)
				for m := maxReleased.Load(); m < fn && !maxReleased.CompareAndSwap(m, fn); {
					m = maxReleased.Load()
				}
				holders.Add(-1)
				if line, err := r.do("r", "hot", f[1]); err != nil || line != "ok" {
					errs <- fmt.Errorf("worker %d release: %q, %v", w, line, err)
					return
				}
			}
		}()
	}
	// Connections that queue for the key and close without waiting.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := rawDial(addr)
				if err != nil {
					errs <- err
					return
				}
				_, _ = r.c.Write([]byte("l\nhot\n10 30\n"))
				time.Sleep(time.Millisecond)
				_ = r.c.Close()
			}
		}()
	}
	timer := time.NewTimer(1500 * time.Millisecond)
	select {
	case err := <-errs:
		close(stop)
		wg.Wait()
		t.Fatal(err)
	case <-timer.C:
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if grants.Load() == 0 {
		t.Fatal("no grant in 1.5 s")
	}
	if on, _ := server.AnswersOnLoop(c.Members()[li].TCP); on != (loops == 1) {
		t.Fatalf("answers on the loop: %v with %d loops", on, loops)
	}
	t.Logf("%d grants", grants.Load())
}

// TestClusterAnswersOnLoop: with one event loop, a leader whose entries
// carry many clients' commands writes their answers in tasks on the loop,
// and every client gets its own answers, in order, across many rounds.
func TestClusterAnswersOnLoop(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{ServerEdit: func(sc *server.Config) { sc.EventLoops = 1 }})
	li := c.Leader(servertest.LeaderTimeout)
	addr := c.Members()[li].Addr
	const clients, rounds = 32, 40
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			r, err := rawDial(addr)
			if err != nil {
				errs <- err
				return
			}
			defer r.c.Close()
			key := fmt.Sprint("k", w)
			for i := range rounds {
				line, err := r.do("l", key, "0 30")
				f := strings.Fields(line)
				if err != nil || len(f) != 3 || f[0] != "ok" {
					errs <- fmt.Errorf("client %d round %d lock: %q, %v", w, i, line, err)
					return
				}
				if line, err := r.do("r", key, f[1]); err != nil || line != "ok" {
					errs <- fmt.Errorf("client %d round %d release: %q, %v", w, i, line, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	on, tasks := server.AnswersOnLoop(c.Members()[li].TCP)
	if !on || tasks == 0 {
		t.Fatalf("answers on the loop: %v, %d tasks run, for %d clients in step", on, tasks, clients)
	}
	t.Logf("%d answer tasks for %d commands", tasks, 2*clients*rounds)
}
