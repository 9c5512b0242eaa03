package ipamd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Wire protocol: JSON over HTTP on a unix socket. Paths below; an error is
// a non-2xx status with an ErrorBody.
const (
	pathAdd    = "/v1/add"
	pathDel    = "/v1/del"
	pathCheck  = "/v1/check"
	pathGC     = "/v1/gc"
	pathStatus = "/v1/status"
)

// Error kinds on the wire, so the plugin maps them to CNI codes.
const (
	KindNoBlock  = "no-block"
	KindNotFound = "not-found"
	KindBad      = "bad-request"
	KindInternal = "internal"
)

// ErrorBody is the body of a failed call.
type ErrorBody struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// GCRequest lists the attachments the runtime still has.
type GCRequest struct {
	Valid []Key `json:"valid"`
}

// GCResponse lists what GC freed.
type GCResponse struct {
	Freed []Allocation `json:"freed"`
}

// Server serves an Allocator on a unix socket.
type Server struct {
	Alloc  *Allocator
	Socket string
	Log    *slog.Logger
}

// Run listens on the socket (replacing a stale one: the store's lock proves
// no other ipamd runs) and serves until ctx ends, then removes the socket.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.Socket), 0o755); err != nil {
		return fmt.Errorf("ipamd: socket folder: %w", err)
	}
	_ = os.Remove(s.Socket)
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		return fmt.Errorf("ipamd: listen on %s: %w", s.Socket, err)
	}
	if err := os.Chmod(s.Socket, 0o600); err != nil {
		l.Close()
		return err
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
		_ = os.Remove(s.Socket)
		return nil
	case err := <-done:
		return fmt.Errorf("ipamd: serve: %w", err)
	}
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathAdd, func(w http.ResponseWriter, r *http.Request) {
		var req AddRequest
		if !decode(w, r, &req) {
			return
		}
		al, err := s.Alloc.Add(r.Context(), req)
		s.reply(w, "add", req.Key, al, err)
	})
	mux.HandleFunc("POST "+pathDel, func(w http.ResponseWriter, r *http.Request) {
		var k Key
		if !decode(w, r, &k) {
			return
		}
		s.reply(w, "del", k, struct{}{}, s.Alloc.Del(k))
	})
	mux.HandleFunc("POST "+pathCheck, func(w http.ResponseWriter, r *http.Request) {
		var k Key
		if !decode(w, r, &k) {
			return
		}
		al, err := s.Alloc.Get(k)
		s.reply(w, "check", k, al, err)
	})
	mux.HandleFunc("POST "+pathGC, func(w http.ResponseWriter, r *http.Request) {
		var req GCRequest
		if !decode(w, r, &req) {
			return
		}
		freed, err := s.Alloc.GC(req.Valid)
		if len(freed) > 0 && s.Log != nil {
			s.Log.Info("CNI GC freed stale allocations", "count", len(freed))
		}
		s.reply(w, "gc", Key{}, GCResponse{Freed: freed}, err)
	})
	mux.HandleFunc("GET "+pathStatus, func(w http.ResponseWriter, r *http.Request) {
		s.reply(w, "status", Key{}, struct{}{}, s.Alloc.Status())
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Kind: KindBad, Message: err.Error()})
		return false
	}
	return true
}

func (s *Server) reply(w http.ResponseWriter, op string, k Key, v any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, v)
		return
	}
	body := ErrorBody{Kind: KindInternal, Message: err.Error()}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNoBlock):
		body.Kind, code = KindNoBlock, http.StatusServiceUnavailable
	case errors.Is(err, ErrNotFound):
		body.Kind, code = KindNotFound, http.StatusNotFound
	case errors.Is(err, ErrBadRequest):
		body.Kind, code = KindBad, http.StatusBadRequest
	}
	if s.Log != nil && op != "status" {
		s.Log.Debug("ipamd request failed", "op", op, "container", k.ContainerID, "ifname", k.IfName, "err", err)
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
