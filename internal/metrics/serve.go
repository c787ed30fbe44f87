package metrics

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// ServeConfig is what Serve does besides serving /metrics; the zero
// value, nothing.
type ServeConfig struct {
	// Ready, if set, also serves GET /healthz (always 200) and GET
	// /readyz: 200 while Ready returns nil, else 503 with its error, in
	// the REST API's JSON shapes.
	Ready func() error
	// Wrap, if set, passes the listener through it first, to guard its
	// accept loop (listen.Set.Wrap).
	Wrap func(net.Listener) net.Listener
	// BearerToken, if set, makes GET /metrics require "Authorization:
	// Bearer <token>", as the REST API's /metrics does when auth is on; a
	// request without it gets 401.
	BearerToken string
}

// Serve listens on addr (port 0 picks one) and serves reg on GET /metrics
// with net/http. It returns once the socket is bound, with a function
// that stops it gracefully within ctx, and the bound address.
func Serve(addr string, reg *Registry, log *zap.Logger, cfg ServeConfig) (stop func(context.Context) error, boundAddr string, err error) {
	if reg == nil {
		return nil, "", errNilRegistry
	}
	log = cmp.Or(log, zap.NewNop())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	if cfg.Wrap != nil {
		ln = cfg.Wrap(ln)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", requireBearer(cfg.BearerToken, reg.Handler()))
	if cfg.Ready != nil {
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		})
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if err := cfg.Ready(); err != nil {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "unavailable", "message": "not ready: " + err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		})
	}
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

func writeJSON(w http.ResponseWriter, status int, v map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// requireBearer wraps h so that it runs only for requests carrying token
// in their Authorization header (compared in constant time); an empty
// token lets every request through.
func requireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="latchd"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"unauthorized","message":"missing or wrong bearer token"}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}
