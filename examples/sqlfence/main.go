// Command sqlfence shows fencing inside a database, without a guard
// process: the fence travels with the data, and the write is conditional
// on it.
//
// The table carries, next to each row, the fence of the last write:
//
//	CREATE TABLE accounts (id int PRIMARY KEY, balance int, fence bigint NOT NULL DEFAULT 0);
//
// and every write made under the lock is:
//
//	UPDATE accounts SET balance = $3, fence = $1 WHERE id = $2 AND fence < $1
//
// The database runs the check and the write as one atomic statement, so
// there is no window between them: a holder whose lease ran out (and whose
// fence is therefore below its successor's) updates 0 rows and learns it
// is stale. "fence < $1" lets each grant write once; use "fence <= $1" if a
// holder writes several times under one grant (the same rule as
// fence.Guard).
//
// To stay dependency-free the table here is a map behind a mutex, which is
// what the row lock of a real database gives the UPDATE.
//
//	go run ./examples/sqlfence -addr 127.0.0.1:6388
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/latchd/latchd/client"
)

type row struct {
	balance int
	fence   uint64
}

// table simulates the accounts table.
type table struct {
	mu   sync.Mutex
	rows map[int]*row
}

// update is
//
//	UPDATE accounts SET balance = $3, fence = $1 WHERE id = $2 AND fence < $1
//
// and returns the number of rows affected.
func (t *table) update(fence uint64, id, balance int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[id]
	if !ok || !(r.fence < fence) {
		return 0
	}
	r.balance, r.fence = balance, fence
	return 1
}

func main() {
	addr := flag.String("addr", client.DefaultAddr, "latchd server address")
	flag.Parse()
	if err := run(*addr); err != nil {
		log.Fatal(err)
	}
}

func run(addr string) error {
	ctx := context.Background()
	db := &table{rows: map[int]*row{42: {balance: 100}}}
	const key = "account:42"

	// Worker A takes the lock on a raw Conn (no renewal), reads the
	// balance, then stalls past its 1-second lease.
	conn, err := client.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	a, err := conn.Acquire(ctx, key, 5*time.Second, time.Second)
	if err != nil {
		return fmt.Errorf("A: acquire: %w", err)
	}
	fmt.Printf("A: holds %s with fence %d, reads balance 100, plans to write 150\n", key, a.Fence())
	time.Sleep(2 * time.Second) // the stall: A's lease expires meanwhile

	// Worker B gets the lock and writes.
	b := &client.Lock{Key: key, AcquireTimeout: 5 * time.Second, LeaseTTL: 10, Servers: []string{addr}}
	got, err := b.Acquire(ctx)
	if err != nil || !got {
		return fmt.Errorf("B: acquire: %v %w", got, err)
	}
	defer func() { _ = b.Release(ctx) }() // the demo ends here; nothing to do on failure
	n := db.update(b.Fence(), 42, 70)
	fmt.Printf("B: fence %d: UPDATE ... SET balance = 70 -> %d row(s)\n", b.Fence(), n)

	// A wakes up and writes what it computed from a stale read.
	n = db.update(a.Fence(), 42, 150)
	fmt.Printf("A: fence %d: UPDATE ... SET balance = 150 -> %d row(s)", a.Fence(), n)
	if n == 0 {
		fmt.Print(" (stale: a newer holder wrote; A must re-read and retry under a new lock)")
	}
	fmt.Println()
	fmt.Printf("accounts[42] = {balance: %d, fence: %d}\n", db.rows[42].balance, db.rows[42].fence)
	return nil
}
