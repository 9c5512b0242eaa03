package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cli/status"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
)

// checkBGPViews checks what `mooring status` and `mooring doctor` say of
// the BGP lab once every session is up: the demo Service's addresses
// ADVERTISED BY the three nodes to the router, no problem (the Service
// has no L2 policy, and that is no problem when BGP serves it), a BGP
// SESSIONS row per node, Established with BFD Up and nothing received (the
// router sends its peers nothing), and doctor quiet about BGP; then, with
// an L2AnnouncementPolicy for the same pool on the router's segment,
// doctor's l2-and-bgp problem.
func checkBGPViews(t *testing.T, ctx context.Context, r *lab.Ready, vips []netip.Addr) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cs := labClientset(t, r)
	statusOut := func(format string) string {
		var out, errw bytes.Buffer
		o := status.Options{Output: format, Since: status.DefaultSince, Announced: status.FromAPI(cl), BGP: status.BGPFromAPI(cl)}
		if err := status.Run(ctx, cs, o, &out, &errw); err != nil || errw.Len() > 0 {
			t.Fatalf("mooring status: %v, %s", err, errw.String())
		}
		return out.String()
	}
	var l status.List
	var why string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		l = status.List{}
		if err := json.Unmarshal([]byte(statusOut(status.OutputJSON)), &l); err != nil {
			t.Fatal(err)
		}
		why = bgpViewProblem(l, vips)
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mooring status in the BGP lab: %s\n%s", why, statusOut(status.OutputWide))
		}
	}
	table := statusOut(status.OutputTable)
	if !strings.Contains(table, "ADVERTISED BY") || !strings.Contains(table, "node-1+node-2+node-3") || !strings.Contains(table, "\nBGP SESSIONS\n") {
		t.Fatalf("mooring status's table lacks ADVERTISED BY or BGP SESSIONS:\n%s", table)
	}
	t.Logf("mooring status in the BGP lab:\n%s", table)

	doctorRun := func() []doctor.Finding {
		in, err := gather.Gather(ctx, cs, labDynamic(t, r), gather.Options{Reader: cl})
		if err != nil {
			t.Fatal(err)
		}
		return doctor.Run(in)
	}
	only := func(fs []doctor.Finding, check string) []doctor.Finding {
		return slices.DeleteFunc(slices.Clone(fs), func(f doctor.Finding) bool { return f.Check != check })
	}
	l2AndBGP := func(fs []doctor.Finding) []doctor.Finding { return only(fs, "l2-and-bgp") }
	first := doctorRun()
	if fs := l2AndBGP(first); len(fs) != 0 {
		t.Fatalf("doctor finds l2-and-bgp in the BGP lab, which announces nothing over L2: %+v", fs)
	}
	if fs := only(first, "bgp-sessions"); len(fs) != 0 {
		t.Fatalf("doctor finds bgp-sessions in the BGP lab, every session up and the router sending nothing: %+v", fs)
	}
	// The mistake docs/bgp.md warns about: the same pool also announced
	// over L2 on the segment the router sits on.
	yes := true
	pol := &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bgp-views-mistake"},
		Spec: mooringv1.L2AnnouncementPolicySpec{Interfaces: []string{"eth0"}, LoadBalancerIPs: &yes}}
	if err := cl.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cl.Delete(context.Background(), pol); err != nil {
			t.Errorf("deleting the L2AnnouncementPolicy: %v", err)
		}
	}()
	var fs []doctor.Finding
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		fs = l2AndBGP(doctorRun())
		if len(fs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("doctor did not flag an address announced over L2 and advertised over BGP on the router's segment within 30 s")
		}
	}
	if fs[0].Severity != doctor.Problem || !strings.Contains(fs[0].Message, lab.RouterHost) || !strings.Contains(fs[0].Message, "node-1, node-2, node-3") {
		t.Fatalf("l2-and-bgp finding: %+v", fs[0])
	}
	t.Logf("doctor with the mistake: %s", fs[0].Message)
}

// bgpViewProblem says what status's list lacks of the BGP lab, "" when
// nothing.
func bgpViewProblem(l status.List, vips []netip.Addr) string {
	i := slices.IndexFunc(l.Services, func(r status.Row) bool { return r.Namespace == lab.DemoNamespace && r.Name == lab.DemoService })
	if i < 0 {
		return fmt.Sprintf("no demo Service in %+v", l.Services)
	}
	row := l.Services[i]
	for _, v := range vips {
		j := slices.IndexFunc(row.AdvertisedBy, func(a status.Advertisement) bool { return a.Address == v.String() })
		if j < 0 {
			return fmt.Sprintf("%s not advertised: %+v", v, row.AdvertisedBy)
		}
		if a := row.AdvertisedBy[j]; !slices.Equal(a.Nodes, []string{"node-1", "node-2", "node-3"}) || !slices.Equal(a.Peers, []string{lab.RouterHost}) {
			return fmt.Sprintf("%s advertised by %v to %v", v, a.Nodes, a.Peers)
		}
	}
	if ps := slices.DeleteFunc(slices.Clone(row.Problems), func(p status.Problem) bool { return !p.Current }); len(ps) > 0 {
		return fmt.Sprintf("current problems %+v", ps)
	}
	if l.BGP == nil || len(l.BGP.Sessions) != 3 {
		return fmt.Sprintf("BGP sessions %+v, want one per node", l.BGP)
	}
	for _, s := range l.BGP.Sessions {
		if s.Peer != lab.RouterHost || s.State != string(mooringv1.BGPStateEstablished) || s.BFD != string(mooringv1.BFDStateUp) || s.PrefixesReceived != 0 {
			return fmt.Sprintf("session %+v, want Established with BFD Up to %s, nothing received", s, lab.RouterHost)
		}
	}
	return ""
}
