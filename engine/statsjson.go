package engine

import "encoding/json"

// EncodeStats encodes st as JSON, with cluster, if not nil, under
// "cluster" (a replicated node's raft state). When the result
// would pass maxBytes it drops entries from the end of each list, in the
// same proportion, until it fits, and marks the answer Truncated with the
// Totals of the whole state: a client always gets well-formed JSON and
// knows what it missed. An answer with every list empty is returned as is
// even when it is still longer than maxBytes. maxBytes <= 0: no cap.
func EncodeStats(st Stats, maxBytes int, cluster any) ([]byte, error) {
	wrap := func(st Stats) any { return st }
	if cluster != nil {
		wrap = func(st Stats) any { return clusterStats{Stats: st, Cluster: cluster} }
	}
	body, err := json.Marshal(wrap(st))
	if err != nil || maxBytes <= 0 || len(body) <= maxBytes {
		return body, err
	}
	if st.Totals == nil {
		st.Totals = &StatsTotals{Locks: len(st.Locks), Semaphores: len(st.Semaphores),
			IdleLocks: len(st.IdleLocks), IdleSemaphores: len(st.IdleSemaphores), RWLocks: len(st.RWLocks)}
	}
	st.Truncated = true
	for len(body) > maxBytes {
		n := len(st.Locks) + len(st.Semaphores) + len(st.IdleLocks) + len(st.IdleSemaphores) + len(st.RWLocks)
		if n == 0 {
			break
		}
		// Keep a little less than the share that fits, so that the
		// loop ends in a step or two whatever the keys' lengths.
		keep := float64(maxBytes) / float64(len(body)) * 0.9
		st.Locks = st.Locks[:int(float64(len(st.Locks))*keep)]
		st.Semaphores = st.Semaphores[:int(float64(len(st.Semaphores))*keep)]
		st.IdleLocks = st.IdleLocks[:int(float64(len(st.IdleLocks))*keep)]
		st.IdleSemaphores = st.IdleSemaphores[:int(float64(len(st.IdleSemaphores))*keep)]
		st.RWLocks = st.RWLocks[:int(float64(len(st.RWLocks))*keep)]
		if body, err = json.Marshal(wrap(st)); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// clusterStats is the stats of a replicated node: the engine's fields and
// the node's raft state under "cluster".
type clusterStats struct {
	Stats
	Cluster any `json:"cluster"`
}
