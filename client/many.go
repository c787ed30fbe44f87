package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/fence"
)

// MaxKeys is the most keys AcquireMany and MultiLock take at once.
const MaxKeys = codec.MaxKeys

// AcquireMany asks for the locks on all keys at once, all or none, waiting
// up to timeout (0: try once); ttl is each lease's length (0: the
// server's default). It returns one Grant per key, in the order of keys,
// each with its own token: release and renew each key with Release and
// Renew. A set that cannot be granted at once waits in the queue of every
// key at the same time and is granted when it is first on all of them, so
// sets that cross ({a,b} and {b,a}) never deadlock. Needs a latchd
// server (the ml command); the keys must be distinct, 1 to MaxKeys, and
// fit one protocol line joined by spaces.
func (m commands) AcquireMany(ctx context.Context, keys []string, timeout, ttl time.Duration) ([]Grant, error) {
	return m.c.acquireMany(ctx, lockCmds, keys, 1, timeout, ttl)
}

// SemAcquireMany is AcquireMany for a slot of each of the semaphores
// keys, of up to limit holders each (the msl command). Release and renew
// each with SemRelease and SemRenew.
func (m commands) SemAcquireMany(ctx context.Context, keys []string, limit int, timeout, ttl time.Duration) ([]Grant, error) {
	return m.c.acquireMany(ctx, semCmds, keys, limit, timeout, ttl)
}

func (c *Conn) acquireMany(ctx context.Context, k cmds, keys []string, limit int, timeout, ttl time.Duration) ([]Grant, error) {
	return c.acquireManySent(ctx, k, keys, "", limit, timeout, ttl, nil)
}

func (c *Cluster) acquireMany(ctx context.Context, k cmds, keys []string, limit int, timeout, ttl time.Duration) ([]Grant, error) {
	line := strings.Join(keys, " ")
	rid, r := c.requestID(line) // "@<id>" rides as the last word of the key line
	return call(c, ctx, "ml", line, r, func(conn *Conn, sent *bool) ([]Grant, error) {
		return conn.acquireManySent(ctx, k, keys, rid, limit, timeout, ttl, sent)
	})
}

// checkKeys checks a set of keys and returns its key line.
func checkKeys(keys []string, limit int) (string, error) {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return "", fmt.Errorf("%w: %d keys, want 1 to %d", ErrBadRequest, len(keys), MaxKeys)
	}
	for i, k := range keys {
		if err := checkKey(k, limit); err != nil {
			return "", err
		}
		for _, o := range keys[:i] {
			if o == k {
				return "", fmt.Errorf("%w: key %q given twice", ErrBadRequest, k)
			}
		}
	}
	line := strings.Join(keys, " ")
	if len(line) > codec.MaxLine {
		return "", fmt.Errorf("%w: keys take %d bytes joined by spaces, over %d", ErrBadRequest, len(line), codec.MaxLine)
	}
	return line, nil
}

func (c *Conn) acquireManySent(ctx context.Context, k cmds, keys []string, rid string, limit int, timeout, ttl time.Duration, sent *bool) ([]Grant, error) {
	line, err := checkKeys(keys, limit)
	if err != nil {
		return nil, err
	}
	if rid == "" {
		if rid, err = manyRequestID(keys, line); err != nil {
			return nil, err
		}
	}
	cmd, arg := manyArg(k, limit, timeout, ttl)
	r, err := c.roundTripID(ctx, cmd, line, rid, arg, time.Duration(seconds(timeout))*time.Second, sent)
	if err != nil {
		return nil, err
	}
	if r.Status != codec.StatusOK {
		return nil, c.check(errorFor(r, ErrBadRequest))
	}
	gs, err := manyGrants(r, len(keys))
	if err != nil {
		return nil, c.fail(err)
	}
	return gs, nil
}

// manyRequestID returns a request id for a set whose last key starts with
// "@" (the server reads a last word "@..." as a request id: one after it
// keeps that word a key), or "" when none is needed.
func manyRequestID(keys []string, line string) (string, error) {
	if len(keys) < 2 || keys[len(keys)-1][0] != '@' {
		return "", nil
	}
	rid := strconv.FormatUint(rand.Uint64(), 16)
	if len(line)+2+len(rid) > codec.MaxLine {
		return "", fmt.Errorf("%w: the last key starts with @: list it earlier", ErrBadRequest)
	}
	return rid, nil
}

// manyArg returns the argument line of an ml (k a lock's commands) or msl.
func manyArg(k cmds, limit int, timeout, ttl time.Duration) (codec.Cmd, []byte) {
	cmd, rest := manyRest(k, limit, ttl)
	return cmd, timedArg(timeout, rest)
}

// manyRest returns the command of an ml or msl and its argument line
// after the timeout.
func manyRest(k cmds, limit int, ttl time.Duration) (codec.Cmd, []byte) {
	if k.sem {
		return codec.CmdMultiSemLock, appendTTL(strconv.AppendInt(nil, int64(limit), 10), ttl)
	}
	return codec.CmdMultiLock, appendTTL(nil, ttl)
}

// manyGrants parses the grant of a set of n keys, "ok <token1> ...
// <tokenN> <ttl>".
func manyGrants(r reply, n int) ([]Grant, error) {
	toks := make([][]byte, n)
	ttl, ok := codec.SplitGrants([]byte(r.Body), toks)
	if !ok || ttl <= 0 {
		return nil, fmt.Errorf("%w: bad grant of %d keys %q", ErrProtocol, n, r.Body)
	}
	gs := make([]Grant, n)
	for i, t := range toks {
		if _, err := fence.Parse(t); err != nil {
			return nil, fmt.Errorf("%w: bad token %q", ErrProtocol, t)
		}
		gs[i] = Grant{Token: string(t), TTL: time.Duration(ttl) * time.Second}
	}
	return gs, nil
}
