package ipam

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
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

// A release grace shorter than the kubelet's retry of a failed pod is
// warned about at start, naming the flag, the value to set and the chart
// value; the default and longer ones are not, nor is anything with pod
// IPAM off.
func TestShortReleaseGraceIsWarned(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		warn bool
	}{
		{Config{Socket: "/run/mooring/ipamd.sock", Grace: 10 * time.Second}, true},
		{Config{Socket: "/run/mooring/ipamd.sock", Grace: 0}, true},
		{Config{Socket: "/run/mooring/ipamd.sock", Grace: 14 * time.Second}, true},
		{Config{Socket: "/run/mooring/ipamd.sock", Grace: 15 * time.Second}, false},
		{Config{Socket: "/run/mooring/ipamd.sock", Grace: 5 * time.Minute}, false},
		{Config{Socket: "", Grace: time.Second}, false},
	} {
		w := tc.cfg.Warnings()
		if got := len(w) > 0; got != tc.warn {
			t.Errorf("grace %v socket %q: warnings %q, want a warning: %v", tc.cfg.Grace, tc.cfg.Socket, w, tc.warn)
		}
		for _, s := range w {
			for _, want := range []string{"--pod-ipam-release-grace=" + tc.cfg.Grace.String(), "set --pod-ipam-release-grace=1m or more", "agent.flags.podIpamReleaseGrace", "kubelet retries"} {
				if !strings.Contains(s, want) {
					t.Errorf("warning %q does not say %q", s, want)
				}
			}
		}
	}
}
