package controller

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/buildinfo"
)

// The controller's metrics server answers /version with the version and
// commit `mooring version` prints, and its build_info gauge says the same.
func TestVersionEndpointAndBuildInfo(t *testing.T) {
	e := startEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := startController(t, e.Config, func(c *Config) { c.MetricsAddr = addr })
	want := buildinfo.Get()
	var body []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/version")
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /version on %s: %v %s", addr, err, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var got buildinfo.Info
	if err := json.Unmarshal(body, &got); err != nil || got != want {
		t.Fatalf("/version = %s (%v), want %+v", body, err, want)
	}
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mooring_controller_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != want.Version || labels["commit"] != want.Commit || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("build_info %v = %v, want version %s commit %s and 1", labels, mf.GetMetric()[0].GetGauge().GetValue(), want.Version, want.Commit)
		}
		return
	}
	t.Error("no mooring_controller_build_info")
}
