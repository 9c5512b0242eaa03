package probe

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// LabContainerPrefix marks containers the lab's kubelet stand-in runs: the
// rest of the ID is the pod process's PID.
const LabContainerPrefix = "mooring-lab://"

// podPID returns the PID behind a lab pod's container.
func podPID(p *corev1.Pod) (int, error) {
	for _, cs := range p.Status.ContainerStatuses {
		if rest, ok := strings.CutPrefix(cs.ContainerID, LabContainerPrefix); ok {
			return strconv.Atoi(rest)
		}
	}
	return 0, fmt.Errorf("pod %s/%s has no %s container: the netns requester works only for pods this machine runs", p.Namespace, p.Name, LabContainerPrefix)
}

// IsLabPod says whether the lab's kubelet stand-in runs p.
func IsLabPod(p *corev1.Pod) bool {
	_, err := podPID(p)
	return err == nil
}

// httpGet sends GET / over c and reads the status line: any HTTP answer
// means the network delivered the request both ways.
func httpGet(ctx context.Context, c net.Conn, host string) error {
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: mooring-probe\r\nConnection: close\r\n\r\n", host); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if !strings.HasPrefix(line, "HTTP/") {
		return fmt.Errorf("not an HTTP answer: %q", line)
	}
	return nil
}

// APIProxy makes the request from inside the pod through the API server's
// pod proxy and the pod's own /dial endpoint (agnhost netexec's: the pod
// dials the target itself). For clusters whose pods the probe machine does
// not run.
type APIProxy struct {
	Client kubernetes.Interface
	Port   int
}

// Request implements Requester.
func (a APIProxy) Request(ctx context.Context, from *corev1.Pod, to netip.AddrPort) error {
	raw, err := a.Client.CoreV1().Pods(from.Namespace).ProxyGet("http", from.Name, strconv.Itoa(a.Port), "/dial", map[string]string{
		"request": "hostname", "protocol": "http", "host": to.Addr().String(), "port": strconv.Itoa(int(to.Port())), "tries": "1",
	}).DoRaw(ctx)
	if err != nil {
		return err
	}
	var out struct {
		Responses []string `json:"responses"`
		Errors    []string `json:"errors"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("/dial answered %q: %w", raw, err)
	}
	if len(out.Responses) == 0 {
		return fmt.Errorf("from %s: %s", from.Name, strings.Join(out.Errors, "; "))
	}
	return nil
}

// errNoNetns is returned on systems without network namespaces.
var errNoNetns = errors.New("probe: entering a pod's network namespace needs Linux")

// dialTimeout bounds connect when ctx has no deadline.
const dialTimeout = 2 * time.Second
