package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// State is what a running `lab up` publishes in <state dir>/state.json so
// that other invocations (exec, kill, down, `mooring failover`) can find it.
type State struct {
	// PID is the `lab up` process; it holds every namespace.
	PID int `json:"pid"`
	// Dir is the state dir; Kubeconfig the admin kubeconfig for the host.
	Dir        string `json:"dir"`
	Kubeconfig string `json:"kubeconfig"`
	// Control is the unix socket `lab kill` and `lab down` talk to.
	Control string `json:"control"`
	// Hosts are the namespaces: the control plane, the nodes, the client.
	Hosts []HostState `json:"hosts"`
	// Ready is set once the lab has printed its ready lines.
	Ready bool `json:"ready"`
	// Service is the demo Service as it was when the lab became ready
	// (`lab status` asks the apiserver for how it is now).
	Service *ServiceState `json:"service,omitempty"`
	// Restarts are the commands `lab restore` runs again in their node.
	Restarts []Restart `json:"restarts,omitempty"`
}

// Restart is a command recorded with `lab exec --restart-on-restore`.
type Restart struct {
	Node string   `json:"node"`
	Argv []string `json:"argv"` // Argv[0] is an absolute path
	Dir  string   `json:"dir,omitempty"`
}

// HostState describes one namespace of a running lab.
type HostState struct {
	Name  string `json:"name"`
	Role  string `json:"role"` // "control-plane", "node", "client" or "router"
	Addr4 string `json:"addr4"`
	Addr6 string `json:"addr6"`
	MAC   string `json:"mac"`
	// TID is a thread of PID that lives in the namespace for the lab's
	// whole life: /proc/<PID>/task/<TID>/ns/net enters it.
	TID int `json:"tid"`
	// VtySocket is the router's folder of FRR vty sockets (`vtysh
	// --vty_socket`); only the router of a BGP lab has one.
	VtySocket string `json:"vtySocket,omitempty"`
}

// ServiceState is the demo Service as `lab up` found it when ready.
type ServiceState struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	ClusterIP []string `json:"clusterIPs"`
	Ingress   []string `json:"ingress,omitempty"` // LoadBalancer addresses
	Port      int      `json:"port"`
}

// Sentinel errors of Open.
var (
	// ErrNoLab means no lab runs with that state dir.
	ErrNoLab = errors.New("lab: no lab is running (start one with `mooring lab up`)")
	// ErrNoHost means the lab has no namespace of that name.
	ErrNoHost = errors.New("lab: no such host")
)

func writeState(path string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no state.json", ErrNoLab, dir)
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("lab: reading %s/state.json: %w", dir, err)
	}
	return &s, nil
}

// processAlive reports whether pid exists (signal 0).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Handle is a running lab seen from another process.
type Handle struct {
	State *State
	hc    *http.Client
}

// Open finds the lab running with state dir dir. It returns ErrNoLab (and
// the dir as it was) when none runs there.
func Open(dir string) (*Handle, error) {
	s, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if !processAlive(s.PID) {
		return nil, fmt.Errorf("%w: process %d of %s has exited (remove the folder if it is still there)", ErrNoLab, s.PID, dir)
	}
	sock := s.Control
	return &Handle{State: s, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}, nil
}

// Host returns the named namespace.
func (h *Handle) Host(name string) (HostState, error) {
	for _, hs := range h.State.Hosts {
		if hs.Name == name {
			return hs, nil
		}
	}
	var names []string
	for _, hs := range h.State.Hosts {
		names = append(names, hs.Name)
	}
	return HostState{}, fmt.Errorf("%w %q: the lab has %v", ErrNoHost, name, names)
}

// NetNSPath returns a path that enters host's network namespace (open it
// and setns, or pass it to `nsenter --net=`).
func (h *Handle) NetNSPath(host string) (string, error) {
	hs, err := h.Host(host)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("/proc/%d/task/%d/ns/net", h.State.PID, hs.TID), nil
}

// Kill hard-kills node: every process of it is SIGKILLed and its eth0 set
// down, by the `lab up` process. It returns when that is done.
func (h *Handle) Kill(ctx context.Context, node string) error {
	return h.post(ctx, "/kill?node="+url.QueryEscape(node))
}

// Restore brings a killed node back (links, addresses, routes, then its
// kubelet, kube-proxy and agent); the Node turns Ready at its first
// heartbeat.
func (h *Handle) Restore(ctx context.Context, node string) error {
	return h.post(ctx, "/restore?node="+url.QueryEscape(node))
}

// RecordRestart asks `lab up` to run r again each time `lab restore`
// brings r.Node back.
func (h *Handle) RecordRestart(ctx context.Context, r Restart) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return h.postBody(ctx, "/restart-on-restore", b)
}

// Down asks `lab up` to remove everything and waits until its process has
// exited (bounded by ctx).
func (h *Handle) Down(ctx context.Context) error {
	if err := h.post(ctx, "/down"); err != nil {
		// The control socket is gone or broken: a signal does the same.
		if kerr := syscall.Kill(h.State.PID, syscall.SIGTERM); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			return errors.Join(err, kerr)
		}
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for processAlive(h.State.PID) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: process %d still running: %w", h.State.PID, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

func (h *Handle) post(ctx context.Context, path string) error { return h.postBody(ctx, path, nil) }

func (h *Handle) postBody(ctx context.Context, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lab"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("lab: control socket %s: %w", h.State.Control, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		// The lab's errors already say "lab: ...".
		return errors.New(string(bytes.TrimSpace(msg)))
	}
	return nil
}

// claimDir makes dir an empty state dir, sweeping what a dead lab left.
func claimDir(dir string) error {
	if s, err := readState(dir); err == nil && processAlive(s.PID) {
		return fmt.Errorf("lab: a lab is already running (pid %d, %s): `mooring lab down` first, or use another --state-dir", s.PID, dir)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, "state.json")); err != nil {
			return fmt.Errorf("lab: %s is not empty and holds no lab state: refusing to use it as a state dir", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("lab: sweeping a dead lab's %s: %w", dir, err)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, "logs"), filepath.Join(dir, "pki"), filepath.Join(dir, "bin")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}
