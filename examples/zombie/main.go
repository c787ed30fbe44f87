// Command zombie shows why a lock alone does not protect a resource, and
// how fencing does.
//
// Holder A takes the lock with a 2-second lease and writes to a resource.
// Then A pauses (a long GC pause, a VM suspended) and, paused, cannot renew:
// its lease expires and holder B takes the lock over and writes. When A
// wakes it still believes it holds the lock and writes again: the resource,
// guarded by fence/fencehttp, answers 409 Conflict because A's token is
// older than B's.
//
//	latchd &                  # a server on 127.0.0.1:6388
//	go run ./examples/zombie  # -addr host:port for another server
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/fence/fencehttp"
)

const key = "example-zombie"

func main() {
	addr := flag.String("addr", client.DefaultAddr, "latchd server address")
	flag.Parse()
	if err := run(*addr); err != nil {
		log.Fatal(err)
	}
}

func run(addr string) error {
	ctx := context.Background()
	url, stop, err := startResource()
	if err != nil {
		return err
	}
	defer stop()

	// A uses the low-level Conn: it renews nothing by itself, which is
	// exactly what a paused process does.
	conn, err := client.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	a, err := conn.Acquire(ctx, key, 5*time.Second, 2*time.Second)
	if err != nil {
		return fmt.Errorf("A: acquire: %w", err)
	}
	fmt.Printf("A: acquired, fence %d, lease %v\n", a.Fence(), a.TTL)
	write(url, "A", a.Token, "written by A")

	fmt.Println("A: pausing for 3s (no renewals)...")
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		b := &client.Lock{Key: key, AcquireTimeout: 10 * time.Second, LeaseTTL: 10, Servers: []string{addr}}
		got, err := b.Acquire(ctx)
		if err != nil || !got {
			log.Printf("B: acquire: %v %v", got, err)
			return
		}
		defer func() { _ = b.Release(ctx) }() // the demo ends here; nothing to do on failure
		fmt.Printf("B: acquired after A's lease expired, fence %d\n", b.Fence())
		write(url, "B", b.Token(), "written by B")
	}()
	time.Sleep(3 * time.Second) // the pause
	<-bDone

	fmt.Println("A: awake, still believes it holds the lock, writes again")
	write(url, "A", a.Token, "late write by A")
	return nil
}

// write PUTs value to the resource, stamped with token.
func write(url, who, token, value string) {
	tok, err := fence.ParseString(token)
	if err != nil {
		log.Printf("%s: %v", who, err)
		return
	}
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(value)) // a constant, valid URL
	fencehttp.SetHeader(req, tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Printf("%s: %v", who, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body) // best effort, for the printout
	fmt.Printf("%s: write %q -> %s %s", who, value, resp.Status, body)
}

// startResource serves a guarded value at /value on a loopback port.
func startResource() (url string, stop func(), err error) {
	var (
		mu    sync.Mutex
		value string
	)
	g := fence.NewGuard()
	h := fencehttp.Handler(g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		value = string(b)
		mu.Unlock()
		tok, _ := fencehttp.FromContext(r.Context())
		fmt.Fprintf(w, "(stored, fence %d)\n", tok.Fence)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
		}
	}()
	return "http://" + ln.Addr().String() + "/value", func() {
		_ = srv.Close() // the demo is over
		mu.Lock()
		fmt.Printf("resource holds %q\n", value)
		mu.Unlock()
	}, nil
}
