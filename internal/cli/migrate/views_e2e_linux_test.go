package migrate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cli/migrate"
	"github.com/mooringlb/mooring/internal/cli/status"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/foreignlb"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
)

// views are `mooring doctor` and `mooring status` as an operator on the
// lab's client machine sees them, before, during and after the migration
// (issue 18: during a migration they said "no problems found" and "the
// controller has not seen this Service").
type views struct {
	t   *testing.T
	r   *lab.Ready
	cs  kubernetes.Interface
	dc  dynamic.Interface
	cl  client.Client
	opt gather.Options
}

func newViews(t *testing.T, r *lab.Ready, cs kubernetes.Interface, dc dynamic.Interface, cl client.Client) *views {
	return &views{t: t, r: r, cs: cs, dc: dc, cl: cl, opt: labtest.DoctorOptions(r, cl)}
}

func (v *views) doctor(ctx context.Context) []doctor.Finding {
	v.t.Helper()
	in, err := gather.Gather(ctx, v.cs, v.dc, v.opt)
	must(v.t, err)
	return doctor.Run(in)
}

func (v *views) status(ctx context.Context) status.List {
	v.t.Helper()
	var out, errw bytes.Buffer
	o := status.Options{Output: status.OutputJSON, Since: status.DefaultSince, Announced: status.FromAPI(v.cl),
		Others: status.OthersFromAPI(v.cs, v.dc, controller.DefaultLeaseNamespace, controller.DefaultLeaseName)}
	must(v.t, status.Run(ctx, v.cs, o, &out, &errw))
	if errw.Len() > 0 {
		v.t.Errorf("status said on stderr: %s", errw.String())
	}
	var l status.List
	must(v.t, json.Unmarshal(out.Bytes(), &l))
	return l
}

func findings(fs []doctor.Finding, sev doctor.Severity, check string) []doctor.Finding {
	return slices.DeleteFunc(slices.Clone(fs), func(f doctor.Finding) bool { return f.Severity != sev || f.Check != check })
}

func dumpFindings(fs []doctor.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("  " + string(f.Severity) + " " + f.Check + " " + f.Node + ": " + f.Message + "\n")
	}
	return b.String()
}

// metallbServes: doctor exits 1 listing the running speakers (and, when
// Mooring announces nothing yet, the foreign MACs answering for the
// Services' addresses); status names MetalLB as the announcer of every
// Service, with Mooring beside it once Mooring announces too.
func (v *views) metallbServes(ctx context.Context, when string, mooringToo bool) {
	t := v.t
	fs := v.doctor(ctx)
	lb := findings(fs, doctor.Problem, "other-load-balancer")
	if !doctor.HasProblem(fs) || len(lb) != 1 || !strings.Contains(lb[0].Message, "3 speaker(s)") || !strings.Contains(lb[0].Message, "(ServiceL2Status)") {
		t.Errorf("%s: doctor does not list MetalLB's running speakers:\n%s", when, dumpFindings(fs))
	}
	foreign := findings(fs, doctor.Problem, "arp-audit")
	if !mooringToo && (len(foreign) == 0 || !slices.ContainsFunc(foreign, func(f doctor.Finding) bool {
		return strings.Contains(f.Message, "foreign MAC") && strings.Contains(f.Message, "MetalLB's speaker on")
	})) {
		t.Errorf("%s: doctor lists no foreign MAC attributed to MetalLB's speaker:\n%s", when, dumpFindings(fs))
	}
	t.Logf("%s: doctor (exit 1):\n%s", when, dumpFindings(slices.DeleteFunc(fs, func(f doctor.Finding) bool { return f.Severity == doctor.Info })))
	l := v.status(ctx)
	for _, row := range l.Services {
		byMetalLB := slices.ContainsFunc(row.AnnouncedBy, func(a status.Announcement) bool { return a.Implementation == foreignlb.MetalLB })
		byMooring := slices.ContainsFunc(row.AnnouncedBy, func(a status.Announcement) bool { return a.Implementation == "" })
		msg := strings.Join(row.Messages, "; ")
		if !byMetalLB || byMooring != mooringToo || !strings.Contains(msg, "served by MetalLB") || strings.Contains(msg, "has not seen") ||
			slices.ContainsFunc(row.Problems, func(p status.Problem) bool { return p.Current }) {
			t.Errorf("%s: status row %s/%s: announced by %+v, problems %+v, messages %q", when, row.Namespace, row.Name, row.AnnouncedBy, row.Problems, msg)
		}
	}
	if !slices.ContainsFunc(l.Notes, func(n string) bool { return strings.HasPrefix(n, "MetalLB runs: 3 speaker Pod(s)") }) {
		t.Errorf("%s: status notes: %q", when, l.Notes)
	}
	t.Logf("%s: status row %s: announced by %+v; %q; notes %q", when, l.Services[0].Name, l.Services[0].AnnouncedBy, l.Services[0].Messages, l.Notes)
}

// afterMigration: the operator's last step (the controller without
// --adopt-only), then doctor and status are clean, plan says there is
// nothing to migrate and lists what MetalLB left behind; each printed
// command, run with the lab's kubectl, removes its object, and plan then
// says nothing is left.
func (v *views) afterMigration(ctx context.Context) {
	t := v.t
	must(t, v.r.Cluster.RestartController(false))
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		m, err := controller.ReadMode(ctx, v.cs.CoordinationV1(), controller.DefaultLeaseNamespace, controller.DefaultLeaseName, time.Now())
		must(t, err)
		if m.Alive && m.Published && !m.AdoptOnly && v.allAssigned(ctx) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller without --adopt-only did not take every Service: %+v", m)
		}
	}
	var fs []doctor.Finding
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if fs = v.doctor(ctx); !doctor.HasProblem(fs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the migration doctor still finds problems:\n%s", dumpFindings(fs))
		}
	}
	t.Logf("after: doctor (exit 0):\n%s", dumpFindings(fs))
	l := v.status(ctx)
	for _, row := range l.Services {
		if len(row.Problems) > 0 || len(row.Messages) > 0 || slices.ContainsFunc(row.AnnouncedBy, func(a status.Announcement) bool { return a.Implementation != "" }) {
			t.Errorf("after: status row %s/%s: %+v", row.Namespace, row.Name, row)
		}
	}
	if len(l.Notes) > 0 {
		t.Errorf("after: status notes %q", l.Notes)
	}
	v.removeLeftovers(ctx)
}

func (v *views) allAssigned(ctx context.Context) bool {
	svcs, err := v.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	must(v.t, err)
	for _, s := range svcs.Items {
		if s.Spec.Type == "LoadBalancer" && !slices.ContainsFunc(s.Status.Conditions, func(c metav1.Condition) bool {
			return c.Type == mooringv1.ConditionAddressAssigned && c.Status == metav1.ConditionTrue
		}) {
			return false
		}
	}
	return true
}

func (v *views) removeLeftovers(ctx context.Context) {
	t := v.t
	o := migrate.Options{Namespace: lab.MetalLBNamespace}
	f, err := migrate.CheckFinished(ctx, o, v.cs, v.dc)
	if err != nil || f == nil || !f.NothingToMigrate || f.ControllerAdoptOnly || len(f.Leftovers) == 0 {
		t.Fatalf("plan after the migration: %+v, %v", f, err)
	}
	var text bytes.Buffer
	must(t, f.WriteText(&text, o))
	t.Logf("plan after the migration:\n%s", text.String())
	for _, want := range []string{"Nothing to migrate", "CustomResourceDefinition servicel2statuses.metallb.io", "Secret metallb-system/memberlist", "kubectl delete namespace metallb-system"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("plan after the migration lacks %q", want)
		}
	}
	for _, l := range f.Leftovers {
		cmd := exec.CommandContext(ctx, "sh", "-c", l.Command)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+v.r.Kubeconfig, "PATH="+v.r.KubectlDir+":"+os.Getenv("PATH"))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", l.Command, err, b)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		f, err = migrate.CheckFinished(ctx, o, v.cs, v.dc)
		must(t, err)
		if len(f.Leftovers) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after running every printed command, plan still lists %+v", f.Leftovers)
		}
	}
	text.Reset()
	must(t, f.WriteText(&text, o))
	if !strings.Contains(text.String(), "Nothing of MetalLB is left.") {
		t.Errorf("plan once everything is removed:\n%s", text.String())
	}
}
