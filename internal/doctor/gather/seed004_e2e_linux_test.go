package gather_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cli/status"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/lab"
)

// responderFault is seed 004's lesson end to end ("Ready, no ERROR" is not
// network health; a warning loop on one node points at the cause): the
// lab's responder-open fault restarts node's agent unable to open its
// ARP/NDP sockets while its process runs. Its /readyz fails within 10 s
// naming the responder, its failure counter climbs, and doctor names the
// node, the step and the counter; `mooring status` shows the addresses
// node should announce as not announced, with the reason ResponderFailed.
func (d *labDoctor) responderFault(node string) {
	t := d.t
	injected, err := d.r.Cluster.StartFault(d.ctx, lab.Fault{Kind: lab.FaultResponderOpen, Node: node})
	must(t, err)
	restarted := time.Now()
	if injected != node {
		t.Fatalf("fault injected on %s, want %s", injected, node)
	}
	n, err := d.cs.CoreV1().Nodes().Get(d.ctx, node, metav1.GetOptions{})
	must(t, err)
	var reasons []string
	for {
		r, err := d.opt.Readyz(d.ctx, n)
		if err == nil && !r.Ready && strings.Contains(strings.Join(r.Reasons, "\n"), "responder") {
			reasons = r.Reasons
			break
		}
		if time.Since(restarted) > 10*time.Second {
			t.Fatalf("%s's /readyz does not name the responder 10 s after its agent restarted under the fault: %+v, %v", node, r, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s's /readyz failed %v after its agent restarted: %s", node, time.Since(restarted).Round(time.Millisecond), strings.Join(reasons, "; "))
	count := func() float64 {
		b, err := d.opt.Metrics(d.ctx, n)
		must(t, err)
		return gather.ParseMetrics(b).StepFailures["responder-open"].Value
	}
	c1 := count()
	time.Sleep(3 * time.Second)
	if c2 := count(); c2 <= c1 {
		t.Errorf("%s's responder-open counter does not climb: %v, 3 s later %v", node, c1, c2)
	} else {
		t.Logf(`mooring_responder_errors_total{op="open"} on %s: %v, 3 s later %v`, node, c1, c2)
	}
	fs := d.waitFor("doctor names the failing agent", 30*time.Second, func(fs []doctor.Finding) bool {
		return has(fs, doctor.Problem, "agent-dataplane", node, "not ready now", "cannot allocate memory",
			`responder-open (mooring_responder_errors_total{op="open"} = `)
	})
	t.Logf("doctor: %s", dump(problems(fs)))
	d.statusShowsUnanswered(node)
}

// statusShowsUnanswered waits until `mooring status` (its Run, as the
// command calls it) lists the demo Service with a ResponderFailed problem
// from node and no address announced by node.
func (d *labDoctor) statusShowsUnanswered(node string) {
	t := d.t
	o := status.Options{Output: status.OutputJSON, Since: status.DefaultSince, Announced: status.FromAPI(d.cl)}
	var table string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		var out, errw bytes.Buffer
		must(t, status.Run(d.ctx, d.cs, o, &out, &errw))
		var l status.List
		must(t, json.Unmarshal(out.Bytes(), &l))
		i := slices.IndexFunc(l.Services, func(r status.Row) bool { return r.Name == d.r.Service.Name })
		if i >= 0 {
			r := l.Services[i]
			failed := slices.ContainsFunc(r.Problems, func(p status.Problem) bool {
				return p.Current && p.Reason == mooringv1.ProblemResponderFailed && p.Node == node && strings.Contains(p.Message, "cannot allocate memory")
			})
			if failed && !slices.ContainsFunc(r.AnnouncedBy, func(a status.Announcement) bool { return a.Node == node }) {
				var tab bytes.Buffer
				must(t, status.Print(&tab, status.OutputWide, l.Services, time.Now()))
				t.Logf("mooring status -o wide with %s's responder failing:\n%s", node, tab.String())
				return
			}
			table = out.String()
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not show %s's addresses as not announced (ResponderFailed):\n%s", node, table)
		}
	}
}
