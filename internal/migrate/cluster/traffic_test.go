package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A --probe request in flight at the last step's check that fails after
// it is seen by Drain (run used to exit 0 with it only in the totals);
// without failures Drain reports none.
func TestDrainSeesTheRequestInFlightAtTheLastCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		hang int32 // the request that outlives the client's timeout (0: none)
		want int
	}{
		{name: "a request fails after the check", hang: 3, want: 1},
		{name: "every request answers", want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				if n.Add(1) == tc.hang {
					time.Sleep(400 * time.Millisecond)
				}
			}))
			t.Cleanup(srv.Close)
			tr := &Traffic{URL: srv.URL, Interval: 10 * time.Millisecond, Client: &http.Client{Timeout: 200 * time.Millisecond}}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go tr.Run(ctx)
			for n.Load() < 3 { // the third request is in flight
				time.Sleep(time.Millisecond)
			}
			if f, _ := tr.FailuresSinceLastCheck(); f != 0 { // the last step's check
				t.Fatalf("%d failures before the check", f)
			}
			got, last, ok := tr.Drain(ctx)
			if !ok || got != tc.want {
				t.Fatalf("Drain = %d (%s), %v; want %d, true", got, last, ok, tc.want)
			}
		})
	}
}
