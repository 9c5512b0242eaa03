package cni_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/mooringlb/mooring/internal/cni"
	"github.com/mooringlb/mooring/internal/ipamd"
)

// TestCNIAddLatency measures CNI ADD latency through libcni, mooring-ipam
// against host-local, interleaved in one run: ADD then DEL of one
// attachment, MOORING_CNI_BENCH pairs per IPAM-alone variant (1000 for the
// figures in docs/benchmarks.md) and a fifth of that under bridge.
// Variants: each IPAM plugin called by libcni as the network's plugin (the
// IPAM cost alone), and each under the bridge plugin in a real pod
// namespace (what a pod start pays). The agent is its own process, as in
// production (see agentEnv).
//
// Every round also execs three floors the same way libcni execs a plugin
// (invoke.RawExec: pipes for stdin, stdout, stderr): /bin/true, an empty
// static Go program and mooring-ipam VERSION. And every mooring-ipam ADD
// is split into the phases of phaseNames from three clocks: libcni's exec
// (timedExec), the plugin's trace line (cni.TraceEnv) and the agent's own
// timestamps (Server.Observe). The slowest 2 % are reported one by one:
// that is where the p99 lives.
//
// Skipped unless MOORING_CNI_BENCH is set: it measures, it does not
// assert speed.
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
	t.Setenv(cni.TraceEnv, "1") // libcni passes the test's environment on to the plugins
	var stderr bytes.Buffer     // the plugins' trace lines
	ex := &timedExec{DefaultExec: &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: &stderr}, PluginDecoder: version.PluginDecoder{}}}
	cfg := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), ex)
	ctx := context.Background()
	ag := startAgentProcess(t, dir)
	defer func() {
		if err := ag.stop(); err != nil {
			t.Errorf("agent process: %v", err)
		}
	}()
	hl := fmt.Sprintf(`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.245.7.0/24"}],[{"subnet":"fd00:8::/120"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}`, filepath.Join(dir, "hl"))
	mi := fmt.Sprintf(`"ipam":{"type":"mooring-ipam","socket":%q}`, ag.sock)
	list := func(s string) *libcni.NetworkConfigList { return mustList(t, s) }
	type variant struct {
		name   string
		l      *libcni.NetworkConfigList
		every  int  // run in every n-th round only
		traced bool // split into phases with the agent's timestamps
		lat    []time.Duration
		phases []phases
	}
	vs := []*variant{
		{name: "mooring-ipam alone", every: 1, traced: true, l: list(`{"cniVersion":"1.1.0","name":"m","plugins":[{"type":"mooring-ipam",` + mi + `}]}`)},
		{name: "host-local alone", every: 1, l: list(`{"cniVersion":"1.1.0","name":"h","plugins":[{"type":"host-local",` + hl + `}]}`)},
		{name: "bridge + mooring-ipam", l: list(`{"cniVersion":"1.1.0","name":"mb","plugins":[{"type":"bridge","bridge":"mbr2","isGateway":true,` + mi + `}]}`), every: 5},
		{name: "bridge + host-local", l: list(`{"cniVersion":"1.1.0","name":"hb","plugins":[{"type":"bridge","bridge":"mbr3","isGateway":true,` + hl + `}]}`), every: 5},
	}
	// MOORING_CNI_BENCH_OTHER=name=/path/to/mooring-ipam,... adds other
	// builds of the plugin (say, of an older commit) to the same run, so
	// that a change is compared under the same load.
	for _, o := range strings.Split(os.Getenv("MOORING_CNI_BENCH_OTHER"), ",") {
		name, path, ok := strings.Cut(o, "=")
		if !ok {
			continue
		}
		typ := "mooring-ipam-" + name
		if err := os.Symlink(path, filepath.Join(bin, typ)); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(bin, typ))
		vs = append(vs, &variant{name: "mooring-ipam " + name + " alone", every: 1, traced: true,
			l: list(`{"cniVersion":"1.1.0","name":"m-` + name + `","plugins":[{"type":"` + typ + `",` + mi + `}]}`)})
	}
	floors := []*floor{
		{name: "exec /bin/true", path: "/bin/true"},
		{name: "exec empty static Go", path: filepath.Join(bin, "gohello")},
		{name: "exec mooring-ipam VERSION", path: filepath.Join(bin, "mooring-ipam"), env: []string{"CNI_COMMAND=VERSION"}},
	}
	podPath := n.newPod("lat")
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	t.Logf("load average at start: %s; %s", loadavg(), cpuPressure())
	raw := &invoke.RawExec{Stderr: os.Stderr}
	order := make([]int, len(vs))
	for i := range order {
		order[i] = i
	}
	rnd := rand.New(rand.NewPCG(12, uint64(pairs)))
	for i := range pairs {
		rnd.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, f := range floors {
			err := n.do(func() error {
				start := time.Now()
				_, err := raw.ExecPlugin(ctx, f.path, []byte(`{"cniVersion":"1.1.0"}`), f.env)
				f.lat = append(f.lat, time.Since(start))
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
		}
		for _, vi := range order { // shuffled: no variant always runs right after another
			v := vs[vi]
			if v.every > 1 && i%v.every != 0 {
				continue
			}
			id := fmt.Sprintf("lat-%d-%d", vi, i)
			rt := runtimeConf(id, podPath)
			var p phases
			stderr.Reset()
			err := n.do(func() error {
				start := time.Now()
				if _, err := cfg.AddNetworkList(ctx, v.l, rt); err != nil {
					return fmt.Errorf("%s ADD: %w", v.name, err)
				}
				end := time.Now()
				v.lat = append(v.lat, end.Sub(start))
				p = phases{start: start, execStart: ex.start, execEnd: ex.end, end: end}
				return cfg.DelNetworkList(ctx, v.l, rt)
			})
			if err != nil {
				t.Fatal(err)
			}
			if v.traced {
				c, ok := ag.call("add", id)
				if !ok {
					t.Fatal("the agent process exited")
				}
				p.agent = c
				p.plugin = pluginTrace(stderr.String(), p.execStart, c.Replied)
				v.phases = append(v.phases, p)
			}
		}
	}
	runtime.ReadMemStats(&ms1)
	t.Logf("load average at end: %s; %s; the test process ran %d GC cycles", loadavg(), cpuPressure(), ms1.NumGC-ms0.NumGC)
	for _, v := range vs {
		t.Logf("%-26s ADD %s", v.name, summary(v.lat))
	}
	for _, f := range floors {
		t.Logf("%-26s     %s", f.name, summary(f.lat))
	}
	for _, v := range vs {
		if v.traced {
			logPhases(t, v.name, v.phases)
		}
	}
}

// floor is a program execed each round the way libcni execs a plugin.
type floor struct {
	name, path string
	env        []string
	lat        []time.Duration
}

// timedExec is libcni's exec with the start and end of the last plugin
// exec recorded.
type timedExec struct {
	*invoke.DefaultExec
	start, end time.Time
}

func (e *timedExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	e.start = time.Now()
	out, err := e.DefaultExec.ExecPlugin(ctx, pluginPath, stdin, environ)
	e.end = time.Now()
	return out, err
}

// phases of one traced ADD.
type phases struct {
	start, execStart, execEnd, end time.Time
	agent                          ipamd.CallTimes
	plugin                         [4]time.Time // init, parsed, answered, printed (cni.TraceEnv)
}

var phaseNames = []string{
	"libcni before exec",
	"exec → plugin's init",
	"init → config parsed",
	"parsed → agent accepted",
	"agent: read request",
	"agent: allocate + journal",
	"agent: write answer",
	"answer → plugin decoded",
	"decoded → result printed",
	"printed → plugin reaped",
	"libcni after exec",
}

func (p phases) split() []time.Duration {
	a, pl := p.agent, p.plugin
	return []time.Duration{p.execStart.Sub(p.start), pl[0].Sub(p.execStart), pl[1].Sub(pl[0]), a.Accepted.Sub(pl[1]),
		a.Decoded.Sub(a.Accepted), a.Handled.Sub(a.Decoded), a.Replied.Sub(a.Handled),
		pl[2].Sub(a.Replied), pl[3].Sub(pl[2]), p.execEnd.Sub(pl[3]), p.end.Sub(p.execEnd)}
}

// pluginTrace reads the plugin's trace line from its stderr. A plugin
// without one (an older build) gets its steps folded into the phases
// around them: init and parsed at the exec, answered and printed at the
// agent's answer.
func pluginTrace(stderr string, exec, replied time.Time) [4]time.Time {
	out := [4]time.Time{exec, exec, replied, replied}
	for line := range strings.Lines(stderr) {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != cni.TracePrefix {
			continue
		}
		for i, kv := range f[1:] {
			_, v, _ := strings.Cut(kv, "=")
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return [4]time.Time{exec, exec, replied, replied}
			}
			out[i] = time.Unix(0, ns)
		}
	}
	return out
}

// logPhases logs each phase's p50 and p99, and its mean over all ADDs
// and over the slowest 2 %.
func logPhases(t *testing.T, name string, ps []phases) {
	slices.SortFunc(ps, func(a, b phases) int { return cmp.Compare(a.end.Sub(a.start), b.end.Sub(b.start)) })
	tail := ps[len(ps)-max(1, len(ps)/50):]
	t.Logf("%s, phases (p50 / p99 / mean of all / mean of the slowest %d ADDs):", name, len(tail))
	for i, pn := range phaseNames {
		var all []time.Duration
		for _, p := range ps {
			all = append(all, p.split()[i])
		}
		var tailSum time.Duration
		for _, p := range tail {
			tailSum += p.split()[i]
		}
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		slices.Sort(all)
		t.Logf("  %-26s %8s %8s %8s %8s", pn, r(quantile(all, 0.50)), r(quantile(all, 0.99)), r(sum/time.Duration(len(all))), r(tailSum/time.Duration(len(tail))))
	}
	for _, p := range tail {
		var parts []string
		for _, d := range p.split() {
			parts = append(parts, r(d).String())
		}
		t.Logf("  slow ADD %s: %s", r(p.end.Sub(p.start)), strings.Join(parts, " "))
	}
}

func r(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func quantile(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))]
}

func summary(lat []time.Duration) string {
	slices.Sort(lat)
	within := 0
	for _, d := range lat {
		if d <= 5*time.Millisecond {
			within++
		}
	}
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s, %.1f%% within 5 ms", len(lat), r(quantile(lat, 0.50)),
		r(quantile(lat, 0.90)), r(quantile(lat, 0.99)), r(lat[len(lat)-1]), 100*float64(within)/float64(len(lat)))
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

// cpuPressure is the first line of /proc/pressure/cpu: the share of time
// some runnable task waited for a CPU.
func cpuPressure() string {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return "cpu pressure unknown"
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return "cpu pressure " + line
}
