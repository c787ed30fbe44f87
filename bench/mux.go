package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchd/latchd/client"
)

// A mux target is latchd in tagged mode: a row's workers share
// Config.Mux connections through one client.Mux, which coalesces what
// they send into one write per flush, instead of one connection each.

// muxPoolKey carries a row's client.Mux to dialMux.
type muxPoolKey struct{}

// withMux opens the Mux of one row of a mux target and returns the
// context that carries it to the row's dialers, and its closer.
func withMux(ctx context.Context, cfg Config, addr string) (context.Context, func(), error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	opts := []client.Option{client.WithIOTimeout(0)}
	if cfg.AuthToken != "" {
		opts = append(opts, client.WithAuthToken(cfg.AuthToken))
	}
	m, err := client.DialMux(dctx, []string{addr}, max(cfg.Mux, 1), opts...)
	if err != nil {
		return ctx, nil, err
	}
	return context.WithValue(ctx, muxPoolKey{}, m), func() { _ = m.Close() }, nil
}

// muxDriver is one worker of a mux target.
type muxDriver struct {
	m       *client.Mux
	key     string
	sem     bool
	limit   int
	timeout time.Duration
	ttl     time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
}

func dialMux(ctx context.Context, cfg Config, _ string, w int) (driver, error) {
	m, ok := ctx.Value(muxPoolKey{}).(*client.Mux)
	if !ok {
		return nil, errors.New("bench: a mux target's row has no Mux")
	}
	dctx, cancel := context.WithCancel(context.Background())
	return &muxDriver{m: m, key: string(cfg.key(w)), sem: cfg.Mode == ModeSem, limit: cfg.Limit,
		timeout: cfg.AcquireTimeout, ttl: cfg.LeaseTTL, ctx: dctx, cancel: cancel}, nil
}

// op acquires and releases, each a tagged request on the shared Mux.
func (d *muxDriver) op() error {
	var g client.Grant
	var err error
	if d.sem {
		g, err = d.m.SemAcquire(d.ctx, d.key, d.limit, d.timeout, d.ttl)
	} else {
		g, err = d.m.Acquire(d.ctx, d.key, d.timeout, d.ttl)
	}
	if err != nil {
		return muxRefusal(err)
	}
	if d.sem {
		err = d.m.SemRelease(d.ctx, d.key, g.Token)
	} else {
		err = d.m.Release(d.ctx, d.key, g.Token)
	}
	return muxRefusal(err)
}

// muxRefusal sorts an error into a refused op (the server answered) or
// the end of the worker's run.
func muxRefusal(err error) error {
	if err == nil || errors.Is(err, client.ErrClosed) || errors.Is(err, context.Canceled) {
		return err
	}
	var nl *client.NotLeaderError
	if errors.As(err, &nl) || errors.Is(err, client.ErrProtocol) {
		return err
	}
	return refused(fmt.Sprint(err))
}

func (d *muxDriver) interrupt() { d.cancel() }

func (d *muxDriver) close() error { d.cancel(); return nil }
