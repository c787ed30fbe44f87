package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// Serve listens on addr (port 0 picks one) and serves reg on GET /metrics
// with net/http, for when the REST server, which otherwise serves
// /metrics, is off. It returns once the socket is bound, with a stop
// function that shuts the listener down gracefully within ctx, and the
// bound address.
func Serve(addr string, reg *Registry, log *zap.Logger) (stop func(context.Context) error, boundAddr string, err error) {
	return ServeWrapped(addr, reg, log, nil)
}

// ServeWrapped is Serve with the listener passed through wrap first (nil:
// as is), to guard its accept loop (listen.Set.Wrap).
func ServeWrapped(addr string, reg *Registry, log *zap.Logger, wrap func(net.Listener) net.Listener) (stop func(context.Context) error, boundAddr string, err error) {
	if reg == nil {
		return nil, "", errNilRegistry
	}
	if log == nil {
		log = zap.NewNop()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg.Handler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	// net/http's own messages are about single connections: debug level.
	if l, lerr := zap.NewStdLogAt(log.Named("metrics_http"), zap.DebugLevel); lerr == nil {
		srv.ErrorLog = l
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics serve", zap.Error(err))
		}
	}()
	boundAddr = ln.Addr().String()
	log.Info("metrics listening", zap.String("addr", boundAddr))
	stop = func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if err == nil {
			select {
			case <-done:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err != nil {
			return fmt.Errorf("metrics: shutdown: %w", err)
		}
		return nil
	}
	return stop, boundAddr, nil
}
