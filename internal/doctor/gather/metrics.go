package gather

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooringlb/mooring/internal/doctor"
)

// HTTPMetrics reads http://<InternalIP>:<port>/metrics with a short
// timeout: an agent that cannot be reached is "not available", not a hang.
func HTTPMetrics(port int, timeout time.Duration) func(ctx context.Context, node *corev1.Node) ([]byte, error) {
	c := &http.Client{Timeout: timeout}
	return func(ctx context.Context, node *corev1.Node) ([]byte, error) {
		var ip string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
				break
			}
		}
		if ip == "" {
			return nil, fmt.Errorf("node %s has no InternalIP", node.Name)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
		}
		return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	}
}

// ParseMetrics reads the counters doctor uses from Prometheus text
// exposition; an absent series counts as 0.
func ParseMetrics(b []byte) *doctor.AgentMetrics {
	m := &doctor.AgentMetrics{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := splitSample(line)
		if !ok {
			continue
		}
		switch {
		case name == "mooring_stale_local_addresses":
			m.StaleLocal += value
		case name == "mooring_split_brain_addresses":
			m.SplitBrain += value
		case name == "mooring_agent_policy_problems":
			m.PolicyProblems += value
		case name == "mooring_agent_api_writes_total" && strings.Contains(labels, `result="error"`):
			m.WriteErrors += value
		case name == "mooring_agent_ownership_changes_total" && strings.Contains(labels, `change="lost"`):
			m.OwnershipLosses += value
		case name == "mooring_members_insecure":
			m.GossipInsecure += value
		}
	}
	return m
}

// splitSample splits `name{labels} value [timestamp]`.
func splitSample(line string) (name, labels string, value float64, ok bool) {
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	} else {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", "", 0, false
		}
		name, rest = f[0], strings.Join(f[1:], " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return name, labels, v, err == nil
}
