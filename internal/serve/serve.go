// Package serve runs an HTTP server for as long as a context lives. It holds
// no logic of Mooring's; it exists so every component stops its servers the
// same way.
package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/mooringlb/mooring/internal/buildinfo"
)

// HTTP serves srv on ln until ctx ends, then shuts it down, giving open
// requests up to a second. It returns nil after a shutdown caused by ctx.
func HTTP(ctx context.Context, srv *http.Server, ln net.Listener) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// VersionHandler answers GET /version with this binary's buildinfo.Info as
// JSON: the same version and commit `mooring version` prints.
func VersionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(buildinfo.Get())
	})
}
