// Package stats defines the report of the protocol's stats command: the
// JSON document the server writes (engine.Snapshot fills it) and the
// client reads (client.Conn.Stats returns it), so their shapes cannot
// drift apart. It is a leaf: the standard library only, data only.
package stats

// Report is the server's state as the stats command reports it, each list
// sorted by key. A reader ignores fields it does not know, so the server
// may add some.
type Report struct {
	Connections    int         `json:"connections"`
	Locks          []Lock      `json:"locks"`
	Semaphores     []Semaphore `json:"semaphores"`
	IdleLocks      []Idle      `json:"idle_locks"`
	IdleSemaphores []Idle      `json:"idle_semaphores"`
	// RWLocks lists the read-write keys in use; left out of the JSON
	// when there are none, so a dflockd client's answer is unchanged.
	// An idle read-write key is listed in IdleLocks.
	RWLocks []RWLock `json:"rwlocks,omitempty"`
	// Delayed lists the slots a lock-delay holds back, one entry per
	// slot; absent when there is none.
	Delayed []Delayed `json:"delayed,omitempty"`
	// Truncated is set when the lists hold only some of the entries, to
	// keep the answer under a size cap; Totals then counts all of them.
	Truncated bool    `json:"truncated,omitempty"`
	Totals    *Totals `json:"totals,omitempty"`
}

// Totals counts every entry of each list of a truncated Report.
type Totals struct {
	Locks          int `json:"locks"`
	Semaphores     int `json:"semaphores"`
	IdleLocks      int `json:"idle_locks"`
	IdleSemaphores int `json:"idle_semaphores"`
	RWLocks        int `json:"rwlocks,omitempty"`
}

// Lock describes a held lock (a key with limit 1).
type Lock struct {
	Key         string `json:"key"`
	OwnerConnID uint64 `json:"owner_conn_id"`
	// OwnerConnIDStr is OwnerConnID in decimal, for JSON readers that
	// parse numbers as float64 and would round it (REST session ids use
	// the top bit).
	OwnerConnIDStr  string  `json:"owner_conn_id_str"`
	LeaseExpiresInS float64 `json:"lease_expires_in_s"`
	Waiters         int     `json:"waiters"`
}

// Semaphore describes a semaphore (a key with limit > 1) in use.
type Semaphore struct {
	Key     string `json:"key"`
	Limit   int    `json:"limit"`
	Holders int    `json:"holders"`
	Waiters int    `json:"waiters"`
}

// Delayed describes one slot of a key held back by a lock-delay after
// its holder lost it involuntarily: it is granted again, to the oldest
// waiter, once the delay ends.
type Delayed struct {
	Key     string  `json:"key"`
	Limit   int     `json:"limit"`
	EndsInS float64 `json:"ends_in_s"`
	Waiters int     `json:"waiters"`
}

// Idle describes a key with no holder and no waiter, kept until it is
// garbage-collected.
type Idle struct {
	Key   string  `json:"key"`
	IdleS float64 `json:"idle_s"`
}

// RWLock describes a read-write key in use: its mode now ("read" when
// readers hold it, "write" when a writer does, "" when nobody holds it
// and a request still waits), how many hold it, and how many wait (of
// them, how many are writers).
type RWLock struct {
	Key            string `json:"key"`
	Mode           string `json:"mode"`
	Holders        int    `json:"holders"`
	Waiters        int    `json:"waiters"`
	WritersWaiting int    `json:"writers_waiting"`
}
