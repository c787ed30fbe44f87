package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/internal/listen"
)

// startDebug serves the runtime profiles on addr (--debug-addr; bind it to
// loopback).
func startDebug(addr string, lns *listen.Set, log *zap.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("debug listener", zap.Error(err))
		return
	}
	ln = lns.Wrap("debug", ln)
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("debug listener", zap.Error(err))
		}
	}()
	log.Info("pprof listening", zap.String("addr", addr))
}
