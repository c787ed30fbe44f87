package client

// Stats is the server's state as the stats command reports it. The server
// may add fields; unknown ones are ignored.
type Stats struct {
	Connections    int             `json:"connections"`
	Locks          []LockStat      `json:"locks"`
	Semaphores     []SemaphoreStat `json:"semaphores"`
	IdleLocks      []IdleStat      `json:"idle_locks"`
	IdleSemaphores []IdleStat      `json:"idle_semaphores"`
}

// LockStat describes a held lock.
type LockStat struct {
	Key             string  `json:"key"`
	OwnerConnID     uint64  `json:"owner_conn_id"`
	LeaseExpiresInS float64 `json:"lease_expires_in_s"`
	Waiters         int     `json:"waiters"`
}

// SemaphoreStat describes a semaphore in use.
type SemaphoreStat struct {
	Key     string `json:"key"`
	Limit   int    `json:"limit"`
	Holders int    `json:"holders"`
	Waiters int    `json:"waiters"`
}

// IdleStat describes a key nobody holds or waits for, kept until pruned.
type IdleStat struct {
	Key   string  `json:"key"`
	IdleS float64 `json:"idle_s"`
}
