package service

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
)

// ServeProfiles serves Go's runtime profiles (net/http/pprof) on addr, apart from the service's
// own listener, for an operator to profile a running process; "" serves nothing. Bind it to a
// loopback or cluster-internal address only: profiles show the process's internals.
func ServeProfiles(addr string, log *slog.Logger) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := sideServer(mux, 0)
	hs.Addr = addr
	go func() {
		if err := hs.ListenAndServe(); err != nil {
			log.Error("profiles server stopped", "addr", addr, "err", err)
		}
	}()
}
