package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/mooringlb/mooring/internal/lab"
)

// The differences between a default install and the lab, as docs/install.md
// lists them: the rows between these markers.
const (
	labDiffBegin = "<!-- chart-vs-lab: checked by internal/chart TestChartDefaultsMatchTheLab -->"
	labDiffEnd   = "<!-- end chart-vs-lab -->"
)

// labDiff is one setting whose value differs.
type labDiff struct{ component, setting, chart, lab string }

// settings are a component's effective settings for a command line: every
// flag's value (given or default) by --name, and the environment the
// command gets. Plumbing that differs by nature (where the kubeconfig is,
// the node's name) is left out; values that only name the same thing
// differently are folded: the node's own address, a key file, a state
// folder.
func settings(t *testing.T, component string, argv []string, env map[string]string, nodeAddr string) map[string]string {
	t.Helper()
	sub, _ := flagsOf(t, component)
	if err := sub.ParseFlags(argv); err != nil {
		t.Fatalf("`mooring %s` refuses %q: %v", component, argv, err)
	}
	out := map[string]string{}
	sub.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Deprecated != "" || f.Name == "help" || f.Name == "kubeconfig" || f.Name == "node-name" {
			return
		}
		v := f.Value.String()
		switch {
		case f.Name == "gossip-bind-address" && (v == "$(HOST_IP)" || v == nodeAddr):
			v = "the node's address"
		case (f.Name == "gossip-key-file" || f.Name == "state-dir") && v != "":
			v = "a file or folder"
		}
		out["--"+f.Name] = v
	})
	for k, v := range env {
		out[k] = v
	}
	return out
}

// chartEnv is a container's environment set to plain values (GOMEMLIMIT),
// leaving out what the pod spec fills in (NODE_NAME, HOST_IP: the flags'
// plumbing).
func chartEnv(c map[string]any) map[string]string {
	out := map[string]string{}
	env, _ := c["env"].([]any)
	for _, e := range env {
		m := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			out[m["name"].(string)] = v
		}
	}
	return out
}

// listedDiffs reads the table of docs/install.md between the markers:
// | component | setting | default install | lab | effect |.
func listedDiffs(t *testing.T) map[labDiff]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), InstallDoc))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, labDiffBegin), strings.Index(s, labDiffEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the chart-vs-lab table between %q and %q", InstallDoc, labDiffBegin, labDiffEnd)
	}
	cell := regexp.MustCompile("^`([^`]*)`$")
	out := map[labDiff]bool{}
	for _, line := range strings.Split(s[i:j], "\n") {
		f := strings.Split(line, "|")
		if len(f) < 7 || strings.HasPrefix(strings.TrimSpace(f[1]), "---") || strings.TrimSpace(f[1]) == "component" {
			continue
		}
		var c [4]string
		for k := range c {
			v := strings.TrimSpace(f[k+1])
			if m := cell.FindStringSubmatch(v); m != nil {
				v = m[1]
			}
			c[k] = v
		}
		if strings.TrimSpace(f[5]) == "" {
			t.Errorf("%s: the difference %v says nothing of its effect", InstallDoc, c)
		}
		out[labDiff{c[0], c[1], c[2], c[3]}] = true
	}
	return out
}

// A default `helm install` (the chart's defaults plus what docs/install.md
// tells a user to set, rendered as `lab up --install=chart` renders it)
// runs every controller and agent flag as the lab's own processes do,
// except the differences docs/install.md lists with their effect: every
// difference found must be listed there, and every listed one must still
// be a difference.
func TestChartDefaultsMatchTheLab(t *testing.T) {
	out, err := helm(t, lab.ChartTemplateArgs(Dir, testKey)...)
	if err != nil {
		t.Fatalf("helm template as lab up --install=chart: %v", err)
	}
	objs := decode(t, out)
	ctrl, agent, nodeAddr := lab.DefaultCommands()
	labArgs := map[string][]string{"controller": ctrl[1:], "agent": agent[1:]}
	labEnv := map[string]map[string]string{"agent": {}}
	for _, kv := range lab.DefaultAgentEnv() {
		k, v, _ := strings.Cut(kv, "=")
		labEnv["agent"][k] = v
	}
	found := map[labDiff]bool{}
	for _, o := range append(ofKind(objs, "Deployment"), ofKind(objs, "DaemonSet")...) {
		c := container(t, o)
		var argv []string
		for _, a := range c["args"].([]any) {
			argv = append(argv, a.(string))
		}
		component := argv[0]
		chartSet := settings(t, component, argv[1:], chartEnv(c), nodeAddr)
		labSet := settings(t, component, labArgs[component], labEnv[component], nodeAddr)
		keys := map[string]bool{}
		for k := range chartSet {
			keys[k] = true
		}
		for k := range labSet {
			keys[k] = true
		}
		for k := range keys {
			cv, lv := chartSet[k], labSet[k]
			if cv != lv {
				found[labDiff{component, k, orUnset(cv), orUnset(lv)}] = true
			}
		}
	}
	if len(found) == 0 && len(objs) == 0 {
		t.Fatal("nothing rendered")
	}
	listed := listedDiffs(t)
	var missing, stale []string
	for d := range found {
		if !listed[d] {
			missing = append(missing, "| "+d.component+" | `"+d.setting+"` | `"+d.chart+"` | `"+d.lab+"` | <effect> |")
		}
	}
	for d := range listed {
		if !found[d] {
			stale = append(stale, strings.Join([]string{d.component, d.setting, d.chart, d.lab}, " "))
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, m := range missing {
		t.Errorf("a default install differs from the lab and %s does not say so: add the row (and its effect), or remove the difference\n%s", InstallDoc, m)
	}
	for _, s := range stale {
		t.Errorf("%s lists a difference that is gone: %s", InstallDoc, s)
	}
}

func orUnset(v string) string {
	if v == "" {
		return "(unset)"
	}
	return v
}
