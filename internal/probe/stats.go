// Package probe is `mooring probe new-pod` (seed 004): it creates fresh
// pods in pairs on two nodes and measures, for each pod, the time from its
// Ready condition to its first successful request to its partner. "Ready"
// says the kubelet saw the pod listening; only this says the network
// reaches it.
//
// The statistics here are pure; newpod.go is the Kubernetes adapter and a
// Requester makes the request from inside a pod (netns_linux.go for the lab
// and any node the probe runs on, apiproxy.go through the API server).
package probe

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Sample is one pod's measurement.
type Sample struct {
	Round   int    `json:"round"`
	Pod     string `json:"pod"`
	Node    string `json:"node"`
	Partner string `json:"partner"`
	// Delay runs from the moment both pods of the pair are Ready to the
	// first successful request to the partner; the summary is over it.
	Delay time.Duration `json:"delayNanos"`
	// SinceOwnReady runs from this pod's own Ready (it includes any wait
	// for a partner that turned Ready later).
	SinceOwnReady time.Duration `json:"sinceOwnReadyNanos"`
	// Failed: no request succeeded before the timeout; Delay is the time
	// waited.
	Failed bool   `json:"failed,omitempty"`
	Error  string `json:"error,omitempty"` // the last request's error, when Failed
	// Attempts is how many requests were made.
	Attempts int `json:"attempts"`
}

// Summary is the distribution of the delays.
type Summary struct {
	Count  int           `json:"count"`
	Failed int           `json:"failed"`
	P50    time.Duration `json:"p50Nanos"`
	P99    time.Duration `json:"p99Nanos"`
	Max    time.Duration `json:"maxNanos"`
	// Slow: samples over the threshold (failures included).
	Slow int `json:"slow"`
}

// Summarize computes the nearest-rank percentiles over every sample
// (failed samples count with the time waited, so they push p99 up).
func Summarize(ss []Sample, threshold time.Duration) Summary {
	s := Summary{Count: len(ss)}
	if len(ss) == 0 {
		return s
	}
	ds := make([]time.Duration, 0, len(ss))
	for _, x := range ss {
		ds = append(ds, x.Delay)
		if x.Failed {
			s.Failed++
		}
		if x.Failed || x.Delay > threshold {
			s.Slow++
		}
	}
	slices.SortFunc(ds, cmp.Compare[time.Duration])
	s.P50, s.P99, s.Max = rank(ds, 0.50), rank(ds, 0.99), ds[len(ds)-1]
	return s
}

// rank is the nearest-rank percentile of sorted ds.
func rank(ds []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// Healthy says whether the run passes: no failure and no sample over the
// threshold.
func (s Summary) Healthy() bool { return s.Count > 0 && s.Slow == 0 }
