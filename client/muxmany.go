package client

import (
	"context"
	"strings"
	"time"

	"github.com/latchd/latchd/codec"
)

// Many keys at once over a Mux: ml and msl in tagged mode. A set waits on
// the server without holding back the Mux's other requests, and goes over
// the connection its first key's hash picks.

// acquireMany implements commander: AcquireMany and SemAcquireMany, and a
// MultiLock whose Mux is set. A set whose context ends while it waits is
// withdrawn from every key's queue like a single acquire (a cancel naming
// its first key), and abandoned: if a grant crossed the cancel, every key
// of it is released.
func (m *Mux) acquireMany(ctx context.Context, k cmds, keys []string, limit int, timeout, ttl time.Duration) ([]Grant, error) {
	line, err := checkKeys(keys, limit)
	if err != nil {
		return nil, err
	}
	rid := m.requestID(line)
	if rid == "" {
		if rid, err = manyRequestID(keys, line); err != nil {
			return nil, err
		}
	}
	cmd, rest := manyRest(k, limit, ttl)
	r, err := m.send(ctx, muxReq{cmd: cmd, home: keys[0], key: line, id: rid, timeout: timeout, rest: rest})
	if err != nil {
		return nil, err
	}
	if r.Status != codec.StatusOK {
		return nil, errorFor(r, ErrBadRequest)
	}
	return manyGrants(r, len(keys))
}

// dropSet releases every key of the grant an abandoned ml or msl got.
func (c *muxConn) dropSet(call *muxCall) {
	keys := strings.Fields(call.key)
	if call.r.Status != codec.StatusOK {
		return
	}
	gs, err := manyGrants(call.r, len(keys))
	if err != nil {
		return
	}
	rel := codec.CmdRelease
	if call.cmd == codec.CmdMultiSemLock {
		rel = codec.CmdSemRelease
	}
	toks := make([]string, len(gs))
	for i, g := range gs {
		toks[i] = g.Token
	}
	c.releaseAll(rel, keys, toks)
}
