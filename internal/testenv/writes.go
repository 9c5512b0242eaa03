package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// MutatingRequests reads the API server's own request counter
// (apiserver_request_total on /metrics) and sums the mutating requests by
// "VERB resource[/subresource]". Benchmarks diff two readings to count what
// a change cost the cluster in writes.
func MutatingRequests(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("testenv: GET /metrics: %w", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		verb, res := metricLabel(line, "verb"), metricLabel(line, "resource")
		if sub := metricLabel(line, "subresource"); sub != "" {
			res += "/" + sub
		}
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		out[verb+" "+res] += v
	}
	return out, sc.Err()
}

// DiffRequests returns after − before, without the zero entries.
func DiffRequests(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func metricLabel(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}
