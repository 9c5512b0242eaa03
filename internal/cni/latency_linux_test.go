package cni_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// TestCNIAddLatency measures CNI ADD latency through libcni, mooring-ipam
// against host-local, interleaved in one run: ADD then DEL of one
// attachment, MOORING_CNI_BENCH pairs per IPAM-alone variant (1000 for the
// figures in docs/benchmarks.md) and a fifth of that under bridge. Variants: each IPAM plugin called by libcni as the
// network's plugin (the IPAM cost alone), and each under the bridge plugin
// in a real pod namespace (what a pod start pays). Skipped unless
// MOORING_CNI_BENCH is set: it measures, it does not assert speed.
//
//	MOORING_CNI_BENCH=1000 go test -count=1 -run TestCNIAddLatency -v ./internal/cni
func TestCNIAddLatency(t *testing.T) {
	pairs, _ := strconv.Atoi(os.Getenv("MOORING_CNI_BENCH"))
	if pairs <= 0 {
		t.Skip("set MOORING_CNI_BENCH=<pairs> to measure")
	}
	needRoot(t)
	bin := pluginDir(t)
	dir := t.TempDir()
	n := newNode(t, 1)
	cfg := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)
	ctx := context.Background()
	ag := startAgent(t, dir, pools())
	defer ag.stop()
	hl := fmt.Sprintf(`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.245.7.0/24"}],[{"subnet":"fd00:8::/120"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}`, filepath.Join(dir, "hl"))
	mi := fmt.Sprintf(`"ipam":{"type":"mooring-ipam","socket":%q}`, ag.sock)
	list := func(s string) *libcni.NetworkConfigList { return mustList(t, s) }
	type variant struct {
		name  string
		l     *libcni.NetworkConfigList
		every int // run in every n-th round only
		lat   []time.Duration
	}
	vs := []*variant{
		{name: "mooring-ipam alone", every: 1, l: list(`{"cniVersion":"1.1.0","name":"m","plugins":[{"type":"mooring-ipam",` + mi + `}]}`)},
		{name: "host-local alone", every: 1, l: list(`{"cniVersion":"1.1.0","name":"h","plugins":[{"type":"host-local",` + hl + `}]}`)},
		{name: "bridge + mooring-ipam", l: list(`{"cniVersion":"1.1.0","name":"mb","plugins":[{"type":"bridge","bridge":"mbr2","isGateway":true,` + mi + `}]}`), every: 5},
		{name: "bridge + host-local", l: list(`{"cniVersion":"1.1.0","name":"hb","plugins":[{"type":"bridge","bridge":"mbr3","isGateway":true,` + hl + `}]}`), every: 5},
	}
	podPath := n.newPod("lat")
	t.Logf("load average at start: %s", loadavg())
	for i := range pairs {
		for _, v := range vs {
			if v.every > 1 && i%v.every != 0 {
				continue
			}
			rt := runtimeConf(fmt.Sprintf("lat-%d", i), podPath)
			err := n.do(func() error {
				start := time.Now()
				if _, err := cfg.AddNetworkList(ctx, v.l, rt); err != nil {
					return fmt.Errorf("%s ADD: %w", v.name, err)
				}
				v.lat = append(v.lat, time.Since(start))
				return cfg.DelNetworkList(ctx, v.l, rt)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("load average at end: %s", loadavg())
	for _, v := range vs {
		slices.Sort(v.lat)
		q := func(p float64) time.Duration { return v.lat[int(p*float64(len(v.lat)-1))] }
		within := 0
		for _, d := range v.lat {
			if d <= 5*time.Millisecond {
				within++
			}
		}
		t.Logf("%-24s ADD n=%d p50=%s p90=%s p99=%s max=%s, %.1f%% within 5 ms", v.name, len(v.lat), q(0.50).Round(10*time.Microsecond),
			q(0.90).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), v.lat[len(v.lat)-1].Round(10*time.Microsecond), 100*float64(within)/float64(len(v.lat)))
	}
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute figures: the latencies
// mean little without the machine's load next to them.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
