package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// controlServer serves the unix socket that `lab kill` and `lab down` use:
// POST /kill?node=<name>, POST /restore?node=<name>, POST
// /restart-on-restore (a Restart as JSON) and POST /down. Kills run in the `lab up` process
// because it holds the processes and the namespaces.
type controlServer struct {
	ln      net.Listener
	kill    func(node string) error
	restore func(node string) error
	record  func(Restart) error
	down    func()
}

// Run serves until ctx ends.
func (s *controlServer) Run(ctx context.Context) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /kill", func(w http.ResponseWriter, r *http.Request) {
		node := r.URL.Query().Get("node")
		if err := s.kill(node); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "killed %s\n", node)
	})
	mux.HandleFunc("POST /restore", func(w http.ResponseWriter, r *http.Request) {
		node := r.URL.Query().Get("node")
		if err := s.restore(node); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "restored %s\n", node)
	})
	mux.HandleFunc("POST /restart-on-restore", func(w http.ResponseWriter, r *http.Request) {
		var rs Restart
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&rs); err != nil {
			http.Error(w, "lab: reading the command to record: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.record(rs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "recorded for %s\n", rs.Node)
	})
	mux.HandleFunc("POST /down", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "going down")
		s.down()
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = err // the listener was closed under us: the lab is going down
	}
}
