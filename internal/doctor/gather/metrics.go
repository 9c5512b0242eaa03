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

// AgentGetter GETs a path of the agent on a node (HTTPAgent).
type AgentGetter func(ctx context.Context, node *corev1.Node, path string) (int, []byte, error)

// HTTPMetrics reads http://<InternalIP>:<port>/metrics with a short
// timeout: an agent that cannot be reached is "not available", not a hang.
func HTTPMetrics(port int, timeout time.Duration) func(ctx context.Context, node *corev1.Node) ([]byte, error) {
	return AgentMetrics(HTTPAgent(port, timeout))
}

// AgentMetrics reads /metrics through get; any status but 200 is an error.
func AgentMetrics(get AgentGetter) func(ctx context.Context, node *corev1.Node) ([]byte, error) {
	return func(ctx context.Context, node *corev1.Node) ([]byte, error) {
		code, b, err := get(ctx, node, "/metrics")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /metrics: %d %s", code, http.StatusText(code))
		}
		return b, err
	}
}

// AgentReadyz reads /readyz through get: 200 is ready, any other status
// is not ready with the body's lines as the reasons.
func AgentReadyz(get AgentGetter) func(ctx context.Context, node *corev1.Node) (*doctor.Readiness, error) {
	return func(ctx context.Context, node *corev1.Node) (*doctor.Readiness, error) {
		code, b, err := get(ctx, node, "/readyz")
		if err != nil {
			return nil, err
		}
		return ParseReadyz(code, b), nil
	}
}

// ParseReadyz turns an agent's /readyz answer into its readiness.
func ParseReadyz(code int, body []byte) *doctor.Readiness {
	r := &doctor.Readiness{Ready: code == http.StatusOK}
	if r.Ready {
		return r
	}
	for _, l := range strings.Split(string(body), "\n") {
		// "(serving from ...)" says where its state comes from, not why
		// it is not ready.
		if l = strings.TrimSpace(l); l != "" && !(strings.HasPrefix(l, "(") && strings.HasSuffix(l, ")")) {
			r.Reasons = append(r.Reasons, l)
		}
	}
	return r
}

// HTTPAgent GETs a path of the agent on a node, at its InternalIP.
func HTTPAgent(port int, timeout time.Duration) AgentGetter {
	c := &http.Client{Timeout: timeout}
	return func(ctx context.Context, node *corev1.Node, path string) (int, []byte, error) {
		var ip string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
				break
			}
		}
		if ip == "" {
			return 0, nil, fmt.Errorf("node %s has no InternalIP", node.Name)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+path, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		return resp.StatusCode, b, err
	}
}

// ParseMetrics reads the counters doctor uses from Prometheus text
// exposition; an absent series counts as 0.
func ParseMetrics(b []byte) *doctor.AgentMetrics {
	m := &metricsBuilder{AgentMetrics: &doctor.AgentMetrics{}}
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
		case name == "mooring_agent_memory_limit_pressure":
			m.MemoryLimit += value
		case name == "mooring_responder_errors_total":
			if op := label(labels, "op"); op != "" {
				m.addStep("responder-"+op, fmt.Sprintf(`%s{op=%q}`, name, op), value)
			}
		case name == "mooring_agent_dataplane_failures_total":
			if step := label(labels, "step"); step != "" {
				m.addStep(step, fmt.Sprintf(`%s{step=%q}`, name, step), value)
			}
		case name == "mooring_agent_dataplane_failing" && value > 0:
			if step := label(labels, "step"); step != "" {
				m.StepsFailing = append(m.StepsFailing, step)
			}
		}
	}
	return m.AgentMetrics
}

type metricsBuilder struct{ *doctor.AgentMetrics }

func (m *metricsBuilder) addStep(step, series string, v float64) {
	if m.StepFailures == nil {
		m.StepFailures = map[string]doctor.StepCounter{}
	}
	c := m.StepFailures[step]
	c.Series, c.Value = series, c.Value+v
	m.StepFailures[step] = c
}

// label is the value of key in `a="x",b="y"`, "" when absent.
func label(labels, key string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == key {
			if u, err := strconv.Unquote(v); err == nil {
				return u
			}
		}
	}
	return ""
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
