// Package promtest reads metric values from a Prometheus registry in
// tests.
package promtest

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value is the first series of name in g whose labels include every
// name=value pair of labels (gauge, counter or untyped); false when there
// is none or g cannot be gathered.
func Value(g prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.Gauge != nil:
					return m.Gauge.GetValue(), true
				case m.Counter != nil:
					return m.Counter.GetValue(), true
				}
				return m.GetUntyped().GetValue(), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		ok := false
		for _, l := range m.GetLabel() {
			ok = ok || (l.GetName() == kv[i] && l.GetValue() == kv[i+1])
		}
		if !ok {
			return false
		}
	}
	return true
}
