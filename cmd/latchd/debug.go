package main

import (
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"
)

// startDebug serves the runtime profiles on addr, for operators chasing a
// slow or fat server. It is off unless --debug-addr is set; bind it to
// loopback.
func startDebug(addr string, log *zap.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Error("debug listener", zap.Error(err))
		}
	}()
	log.Info("pprof listening", zap.String("addr", addr))
}
