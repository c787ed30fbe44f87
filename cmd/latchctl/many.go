package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/latchd/latchd/client"
)

// latchctl lock K1 K2 ... -- CMD (and sem --limit N K1 K2 ...) holds all
// the keys at once, all or none (client.MultiLock), while CMD runs. CMD
// sees the keys, tokens and fences as space-separated lists in the
// order given: LATCHD_KEY="K1 K2", LATCHD_TOKEN="T1 T2",
// LATCHD_FENCE="F1 F2".

// manyHolder is a client.MultiLock as a holder: Token lists every key's
// token, Fence is the first key's.
type manyHolder struct{ *client.MultiLock }

func (m manyHolder) Token() string { return strings.Join(m.Tokens(), " ") }

func (m manyHolder) Fence() uint64 {
	if f := m.Fences(); len(f) > 0 {
		return f[0]
	}
	return 0
}

// many is take's MultiLock for two or more keys.
func (r *held) many() (holder, func(context.Context) error, func(context.Context) (bool, error)) {
	m := &client.MultiLock{Keys: r.keys, Limit: r.limit, LeaseTTL: r.ttlSeconds(), Options: r.opts,
		AcquireTimeout: waitFor(r.timeout)}
	setTarget(r.c, &m.Servers, &m.Cluster)
	return manyHolder{m}, m.Release, m.Acquire
}

// fenceEnv is LATCHD_FENCE: the fence in 16 hex digits, or for many keys
// each key's, separated by spaces.
func fenceEnv(h holder) string {
	m, ok := h.(manyHolder)
	if !ok {
		return fmt.Sprintf("%016x", h.Fence())
	}
	fs := m.Fences()
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%016x", f)
	}
	return strings.Join(parts, " ")
}
