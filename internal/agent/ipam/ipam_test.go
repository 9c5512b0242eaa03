package ipam

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"
)

// Pod IPAM retries only while the API server is unreachable; any other
// error (a mode change) still ends the agent.
func TestPodIPAMRetriesOnlyWhenUnreachable(t *testing.T) {
	refused := fmt.Errorf("read the pod IPAM mode: failed to get server groups: %w",
		&url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}})
	if !unreachable(refused) {
		t.Errorf("%v: want unreachable", refused)
	}
	if other := errors.New("pod IPAM mode changed from cluster-pool to multi-pool: restarting the agent to follow it"); unreachable(other) {
		t.Errorf("%v: want not unreachable", other)
	}
}
