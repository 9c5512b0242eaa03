package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/migrate"
)

// Runner walks a plan.
type Runner struct {
	CS       kubernetes.Interface
	DC       dynamic.Interface
	Facts    migrate.Facts
	Snapshot Snapshot
	// Apply are the Mooring objects to apply; MetalLB the MetalLB custom
	// resources to save and delete, with their resource.
	Apply   []*unstructured.Unstructured
	MetalLB []Object
	// SpeakerPodUIDs are MetalLB's running speaker pods before the
	// migration, name → UID (CheckSpeakersKept).
	SpeakerPodUIDs map[string]string
	// Responders counts ARP/NDP responders per address from a host on the
	// segment; nil skips CheckResponders.
	Responders func(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error)
	// Traffic is the operator's probe; nil skips CheckTraffic.
	Traffic *Traffic
	// Reader computes who announces each address the way the agents do
	// (gather.Announced: the agents' L2Announcers); nil: none is known.
	Reader client.Reader
	// CheckTimeout bounds how long checks may take to pass after a step.
	CheckTimeout time.Duration
	Out          io.Writer
	Log          *slog.Logger
	// AfterStep, when set, is called after step i's checks passed (before
	// the next step): a look at the cluster mid-migration.
	AfterStep func(ctx context.Context, i int)

	// splitSince is when MetalLB's speakers stopped answering: agents'
	// split-brain reports before it name MetalLB's expected second answer
	// (the responders check verifies that overlap itself); zero while they
	// may answer.
	splitSince time.Time
	// audit is the last responders check's finding per address
	// ("addr=node(role)+node(role)"), printed once a step's checks pass.
	audit []string
}

// Object is a custom resource with its resource name.
type Object struct {
	GVR schema.GroupVersionResource
	Obj *unstructured.Unstructured
}

// StepError says which step's check failed and what was rolled back how.
type StepError struct {
	Step   string
	Failed string
	Undo   []string // rollback of every step taken, latest first
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %q: check failed: %s; to undo the steps taken, in this order: %s", e.Step, e.Failed, strings.Join(e.Undo, "; then "))
}

// Run performs each step and its checks; it stops at the first failed
// check (steps[0] is the pre-check: a failure there means nothing was
// changed). The last step is the operator's (a controller flag) and is
// only printed.
func (r *Runner) Run(ctx context.Context, steps []migrate.Step) error {
	var undo []string
	for i, s := range steps {
		fmt.Fprintf(r.Out, "step %d: %s\n", i, s.Name)
		if i == len(steps)-1 {
			for _, a := range s.Actions {
				fmt.Fprintf(r.Out, "  by hand: %s\n", a)
			}
			break
		}
		if err := r.act(ctx, s); err != nil {
			return &StepError{Step: s.Name, Failed: "the step itself: " + err.Error(), Undo: append(slices.Clone(s.Rollback), undo...)}
		}
		timeout := r.CheckTimeout
		if i == 0 {
			timeout = 0 // pre-checks describe the cluster as it is: no waiting
		}
		if err := r.checks(ctx, s, timeout); err != nil {
			u := undo
			if i > 0 {
				u = append(slices.Clone(s.Rollback), undo...)
			}
			if i == 0 {
				return fmt.Errorf("pre-check failed, nothing was changed: %w", err)
			}
			return &StepError{Step: s.Name, Failed: err.Error(), Undo: u}
		}
		if i > 0 {
			undo = append(slices.Clone(s.Rollback), undo...)
		}
		fmt.Fprintf(r.Out, "  ok: %s\n", r.joinChecks(s.Checks))
		if len(r.audit) > 0 && slices.Contains(s.Checks, migrate.CheckResponders) {
			fmt.Fprintf(r.Out, "  responders: %s\n", strings.Join(r.audit, " "))
		}
		if r.AfterStep != nil {
			r.AfterStep(ctx, i)
		}
	}
	return nil
}

func (r *Runner) joinChecks(cs []migrate.CheckID) string {
	var out []string
	for _, c := range cs {
		switch {
		case c == migrate.CheckResponders && r.Responders == nil:
			out = append(out, string(c)+" (skipped: no --interface)")
		case c == migrate.CheckTraffic && r.Traffic == nil:
			out = append(out, string(c)+" (skipped: no --probe)")
		default:
			out = append(out, string(c))
		}
	}
	return strings.Join(out, ", ")
}

// act performs step s of migrate.Plan.
func (r *Runner) act(ctx context.Context, s migrate.Step) error {
	switch s.Kind {
	case migrate.KindApply:
		return r.apply(ctx, r.bgpMode())
	case migrate.KindWithdrawL2:
		if err := r.withdrawSpeakers(ctx); err != nil {
			return err
		}
		r.splitSince = time.Now()
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:"true"}}}}}`, migrate.SpeakerOffLabel)
		for _, s := range r.Facts.Speakers {
			if _, err := r.CS.AppsV1().DaemonSets(r.Facts.MetalLBNamespace).Patch(ctx, s, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("scaling DaemonSet %s to zero: %w", s, err)
			}
			fmt.Fprintf(r.Out, "  speakers %s/%s scaled to zero (nodeSelector %s=true)\n", r.Facts.MetalLBNamespace, s, migrate.SpeakerOffLabel)
		}
	case migrate.KindPinSpeakers:
		return r.pinSpeakers(ctx)
	case migrate.KindHandOverNode:
		return r.labelNode(ctx, s.Node, false)
	case migrate.KindRemoveMetalLB:
		if r.bgpMode() {
			// The BGPPeers as imported: no node has the label any more.
			if err := r.apply(ctx, false); err != nil {
				return err
			}
		}
		return r.removeMetalLB(ctx)
	}
	return nil
}

// apply applies the imported Mooring objects, the BGPPeers kept off the
// nodes whose speaker runs (keepOff).
func (r *Runner) apply(ctx context.Context, keepOff bool) error {
	for _, o := range r.Apply {
		if keepOff && o.GetKind() == "BGPPeer" {
			var err error
			if o, err = keptOffSpeakers(o); err != nil {
				return err
			}
		}
		gvr := schema.GroupVersionResource{Group: o.GroupVersionKind().Group, Version: o.GroupVersionKind().Version, Resource: resourceOf(o.GetKind())}
		if _, err := r.DC.Resource(gvr).Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "mooring-migrate", Force: true}); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		fmt.Fprintf(r.Out, "  applied %s %s\n", o.GetKind(), o.GetName())
	}
	return nil
}

// withdrawSpeakers saves and deletes MetalLB's L2Advertisements, so that
// every speaker withdraws its announcements at once, and waits until
// MetalLB's ServiceL2Statuses (one per announced Service) are gone.
func (r *Runner) withdrawSpeakers(ctx context.Context) error {
	var saved []byte
	var advs []Object
	for _, o := range r.MetalLB {
		if o.GVR.Resource == "l2advertisements" {
			advs = append(advs, o)
			b, err := yaml.Marshal(cleanForSave(o.Obj))
			if err != nil {
				return err
			}
			saved = append(append(saved, "---\n"...), b...)
		}
	}
	if len(advs) == 0 {
		return nil
	}
	if err := os.MkdirAll(r.Facts.SaveDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(r.Facts.SaveDir, "metallb-l2advertisements.yaml")
	if err := os.WriteFile(path, saved, 0o644); err != nil {
		return fmt.Errorf("saving MetalLB's L2Advertisements: %w", err)
	}
	for _, o := range advs {
		if err := ignoreNotFound(r.DC.Resource(o.GVR).Namespace(o.Obj.GetNamespace()).Delete(ctx, o.Obj.GetName(), metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("deleting L2Advertisement %s: %w", o.Obj.GetName(), err)
		}
	}
	fmt.Fprintf(r.Out, "  deleted %d MetalLB L2Advertisements (saved to %s): the speakers withdraw together\n", len(advs), path)
	deadline := time.Now().Add(r.CheckTimeout)
	for {
		l, err := r.DC.Resource(metallbL2Status).Namespace(r.Facts.MetalLBNamespace).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) || (err == nil && len(l.Items) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MetalLB's speakers still announce %d Services %v after their L2Advertisements were deleted", len(l.Items), r.CheckTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cleanForSave drops what the apiserver sets, so the saved object applies.
func cleanForSave(o *unstructured.Unstructured) map[string]any {
	c := o.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(c.Object, "metadata", "uid")
	unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
	unstructured.RemoveNestedField(c.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(c.Object, "metadata", "generation")
	unstructured.RemoveNestedField(c.Object, "status")
	return c.Object
}

func resourceOf(kind string) string {
	switch kind {
	case "LoadBalancerIPPool":
		return "loadbalancerippools"
	case "L2AnnouncementPolicy":
		return "l2announcementpolicies"
	case "BGPCommunity":
		return "bgpcommunities"
	}
	return strings.ToLower(kind) + "s"
}

// removeMetalLB saves every MetalLB object to SaveDir, then deletes the
// webhooks first, the controllers, the custom resources and the speakers.
func (r *Runner) removeMetalLB(ctx context.Context) error {
	if err := os.MkdirAll(r.Facts.SaveDir, 0o755); err != nil {
		return err
	}
	var saved []byte
	for _, o := range r.MetalLB {
		b, err := yaml.Marshal(cleanForSave(o.Obj))
		if err != nil {
			return err
		}
		saved = append(append(saved, "---\n"...), b...)
	}
	path := filepath.Join(r.Facts.SaveDir, "metallb-objects.yaml")
	if err := os.WriteFile(path, saved, 0o644); err != nil {
		return fmt.Errorf("saving MetalLB's objects: %w", err)
	}
	fmt.Fprintf(r.Out, "  saved %d MetalLB objects to %s\n", len(r.MetalLB), path)
	ns := r.Facts.MetalLBNamespace
	for _, w := range r.Facts.Webhooks {
		if err := ignoreNotFound(r.CS.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, w, metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("deleting webhook %s: %w", w, err)
		}
		fmt.Fprintf(r.Out, "  deleted ValidatingWebhookConfiguration %s\n", w)
	}
	for _, d := range r.Facts.Controllers {
		dep, err := r.CS.AppsV1().Deployments(ns).Get(ctx, d, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if err := r.stopController(ctx, dep); err != nil {
			return fmt.Errorf("deleting Deployment %s: %w", d, err)
		}
		fmt.Fprintf(r.Out, "  deleted Deployment %s/%s\n", ns, d)
		// A MetalLB controller still running when its pools go takes their
		// addresses off the Services: its pods must be gone first, which
		// with stopController's grace period means their containers
		// stopped.
		if err := r.waitPodsGone(ctx, ns, dep.Spec.Selector); err != nil {
			return fmt.Errorf("MetalLB's controller %s: %w", d, err)
		}
		fmt.Fprintf(r.Out, "  MetalLB controller %s/%s: no pod left\n", ns, d)
	}
	for _, o := range r.MetalLB {
		ri := r.DC.Resource(o.GVR).Namespace(o.Obj.GetNamespace())
		if err := ignoreNotFound(ri.Delete(ctx, o.Obj.GetName(), metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("deleting %s %s: %w", o.Obj.GetKind(), o.Obj.GetName(), err)
		}
	}
	for _, s := range r.Facts.Speakers {
		if err := ignoreNotFound(r.CS.AppsV1().DaemonSets(ns).Delete(ctx, s, metav1.DeleteOptions{})); err != nil {
			return fmt.Errorf("deleting DaemonSet %s: %w", s, err)
		}
		fmt.Fprintf(r.Out, "  deleted DaemonSet %s/%s\n", ns, s)
	}
	return nil
}

// waitPodsGone waits (up to CheckTimeout) until no pod matches sel.
func (r *Runner) waitPodsGone(ctx context.Context, ns string, sel *metav1.LabelSelector) error {
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.CheckTimeout)
	for {
		pods, err := r.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: ls.String()})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d pods (%s) still there %v after the Deployment was deleted", len(pods.Items), pods.Items[0].Name, r.CheckTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checks polls the step's checks until all pass or timeout passes;
// the traffic check is not retried: a failed request is a failure.
func (r *Runner) checks(ctx context.Context, s migrate.Step, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := r.checkOnce(ctx, s)
		if err == nil || time.Now().After(deadline) || isFinal(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

type finalError struct{ error }

func isFinal(err error) bool { _, ok := err.(finalError); return ok }

func (r *Runner) checkOnce(ctx context.Context, s migrate.Step) error {
	var findings []doctor.Finding
	needDoctor := slices.Contains(s.Checks, migrate.CheckNoStaleLocal) || slices.Contains(s.Checks, migrate.CheckStrictARP)
	if needDoctor {
		in, err := gather.Gather(ctx, r.CS, r.DC, gather.Options{})
		if err != nil {
			return err
		}
		in.Events = slices.DeleteFunc(in.Events, func(e doctor.Event) bool {
			return e.Reason == doctor.ReasonSplitBrain && (s.MetalLBAnnounces || e.Time.Before(r.splitSince))
		})
		findings = doctor.Run(in)
	}
	for _, c := range s.Checks {
		var err error
		switch c {
		case migrate.CheckAddressesUnchanged:
			err = r.addressesUnchanged(ctx)
		case migrate.CheckNoStaleLocal:
			// A gate, so stricter than doctor's exit code: an agent's
			// report no live check confirms (history) still stops the run
			// until the operator has looked and the Event is gone.
			err = doctorSays(findings, true, "stale-local-address", "split-brain")
		case migrate.CheckStrictARP:
			err = doctorSays(findings, false, "kube-proxy")
		case migrate.CheckMooringAnnounces:
			err = r.mooringAnnounces(ctx)
		case migrate.CheckResponders:
			err = r.responders(ctx, s)
		case migrate.CheckAdoptOnly:
			err = r.adoptOnly(ctx)
		case migrate.CheckGossipPort:
			err = r.gossipPortFree(ctx)
		case migrate.CheckTraffic:
			if r.Traffic != nil {
				if n, last := r.Traffic.FailuresSinceLastCheck(); n > 0 {
					err = finalError{fmt.Errorf("%d requests to %s failed since the previous check (last: %s)", n, r.Traffic.URL, last)}
				}
			}
		case migrate.CheckSpeakersGone:
			err = r.speakersGone(ctx)
		case migrate.CheckSpeakersKept:
			err = r.speakersKept(ctx)
		case migrate.CheckBGPNodeHandedOver:
			err = r.bgpNodeHandedOver(ctx, s.Node)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
	}
	return nil
}

// doctorSays fails on a problem doctor's checks found, and with history
// on their history too (an Event no live check confirms).
func doctorSays(fs []doctor.Finding, history bool, checks ...string) error {
	for _, f := range fs {
		if !slices.Contains(checks, f.Check) {
			continue
		}
		switch {
		case f.Severity == doctor.Problem:
			return fmt.Errorf("%s (node %s); fix: %s", f.Message, f.Node, f.Fix)
		case f.Severity == doctor.History && history:
			return fmt.Errorf("%s (node %s); fix: %s; once it is fixed, delete the Event (kubectl -n NAMESPACE get events --field-selector reason=%s) or wait for it to expire",
				f.Message, f.Node, f.Fix, reasonOf(f.Check))
		}
	}
	return nil
}

func reasonOf(check string) string {
	if check == "split-brain" {
		return doctor.ReasonSplitBrain
	}
	return doctor.ReasonStaleLocalAddress
}

func (r *Runner) addressesUnchanged(ctx context.Context) error {
	now, err := TakeSnapshot(ctx, r.CS)
	if err != nil {
		return err
	}
	var diffs []string
	for k, want := range r.Snapshot {
		if got := now[k]; !slices.Equal(got, want) {
			diffs = append(diffs, fmt.Sprintf("%s had %v, now %v", k, want, got))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		return finalError{fmt.Errorf("addresses changed: %s", strings.Join(diffs, "; "))}
	}
	return nil
}

func (r *Runner) mooringAnnounces(ctx context.Context) error {
	owners, err := gather.Announced(ctx, r.Reader)
	if err != nil {
		return err
	}
	var missing []string
	for k, addrs := range r.Snapshot {
		ns, name, _ := strings.Cut(k, "/")
		if _, err := r.CS.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		for _, a := range addrs {
			if owners[a] == "" {
				missing = append(missing, fmt.Sprintf("%s (%s)", a, k))
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("no Mooring agent announces %s yet: check the agents' logs and the L2AnnouncementPolicies", strings.Join(missing, ", "))
	}
	return nil
}

// responders counts every address's ARP/NDP responders and names each by
// node (the MAC that answers for the node's InternalIP). Every responder
// must be an announcer: MetalLB's (its ServiceL2Status) while the step lets
// the speakers run, Mooring's owner (the agents' L2Announcers) always; at
// most s.MaxResponders and at least one per address.
func (r *Runner) responders(ctx context.Context, s migrate.Step) error {
	if r.Responders == nil {
		return nil
	}
	addrs := r.Snapshot.Addrs()
	nodeIPs, err := r.nodeInternalIPs(ctx)
	if err != nil {
		return err
	}
	probe := slices.Clone(addrs)
	for ip := range nodeIPs {
		probe = append(probe, ip)
	}
	got, err := r.Responders(ctx, probe)
	if err != nil {
		return err
	}
	macNode := map[string]string{}
	for ip, node := range nodeIPs {
		for _, m := range got[ip] {
			macNode[m.String()] = node
		}
	}
	mooring, err := gather.Announced(ctx, r.Reader)
	if err != nil {
		return err
	}
	var metallb map[netip.Addr]string
	if s.MetalLBAnnounces {
		if metallb, err = r.metallbAnnouncers(ctx); err != nil {
			return err
		}
	}
	var bad, audit []string
	for _, a := range addrs {
		macs := got[a]
		var who, strays, short []string
		for _, m := range macs {
			node, known := macNode[m.String()]
			if !known {
				node = "an unknown host"
			}
			var role, tag string
			switch {
			case known && mooring[a] == node:
				role, tag = "Mooring's agent", "mooring"
			case s.MetalLBAnnounces && known && metallb[a] == node:
				role, tag = "MetalLB's speaker", "metallb"
			case s.MetalLBAnnounces && metallb[a] == "" && len(macs) == 1:
				role, tag = "MetalLB? (no ServiceL2Status names its node)", "metallb?"
			default:
				role, tag = "announces nothing", "STRAY"
				if known {
					strays = append(strays, node)
				} else {
					strays = append(strays, m.String())
				}
			}
			who = append(who, fmt.Sprintf("%s %s (%s)", node, m, role))
			short = append(short, fmt.Sprintf("%s(%s)", node, tag))
		}
		audit = append(audit, a.String()+"="+strings.Join(short, "+"))
		switch {
		case len(macs) == 0:
			bad = append(bad, fmt.Sprintf("%s has no ARP/NDP responder", a))
		case len(strays) > 0:
			bad = append(bad, fmt.Sprintf("%s is answered by %s: %s answers although it announces nothing — a stale local copy of the address (a leftover kube-ipvs0?) or another announcer; "+
				"remove the address from the interfaces of %s or set net.ipv4.conf.all.arp_ignore=1 there (and stop any other announcer), then run again",
				a, strings.Join(who, ", "), strings.Join(strays, ", "), strings.Join(strays, ", ")))
		case len(macs) > s.MaxResponders:
			bad = append(bad, fmt.Sprintf("%s is answered by %d (%s), want at most %d", a, len(macs), strings.Join(who, ", "), s.MaxResponders))
		}
	}
	r.audit = audit
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// nodeInternalIPs maps every Node InternalIP to its node.
func (r *Runner) nodeInternalIPs(ctx context.Context) (map[netip.Addr]string, error) {
	nodes, err := r.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	out := map[netip.Addr]string{}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				out[ip.Unmap()] = n.Name
			}
		}
	}
	return out, nil
}

// metallbL2Status is MetalLB's record (v0.14+) of the node announcing a
// Service in L2 mode.
var metallbL2Status = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}

// metallbAnnouncers maps each recorded address to the node MetalLB's
// ServiceL2Status names; empty when MetalLB keeps none (before v0.14).
func (r *Runner) metallbAnnouncers(ctx context.Context) (map[netip.Addr]string, error) {
	out := map[netip.Addr]string{}
	l, err := r.DC.Resource(metallbL2Status).Namespace(r.Facts.MetalLBNamespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing MetalLB's ServiceL2Statuses: %w", err)
	}
	for _, st := range l.Items {
		node, _, _ := unstructured.NestedString(st.Object, "status", "node")
		name, _, _ := unstructured.NestedString(st.Object, "status", "serviceName")
		ns, _, _ := unstructured.NestedString(st.Object, "status", "serviceNamespace")
		for _, a := range r.Snapshot[ns+"/"+name] {
			out[a] = node
		}
	}
	return out, nil
}

// adoptOnly checks that the leading Mooring controller runs with
// --adopt-only, from the flags it publishes on its leader-election Lease.
func (r *Runner) adoptOnly(ctx context.Context) error {
	ns, name := r.Facts.LeaseNamespace, r.Facts.LeaseName
	m, err := controller.ReadMode(ctx, r.CS.CoordinationV1(), ns, name, time.Now())
	switch {
	case err != nil:
		return err
	case !m.Found:
		return fmt.Errorf("no Lease %s/%s: no Mooring controller has led yet; install it with --adopt-only (or pass --lease-namespace/--lease-name)", ns, name)
	case m.Holder == "":
		return fmt.Errorf("Lease %s/%s has no holder: no Mooring controller leads; start it with --adopt-only", ns, name)
	case !m.Alive:
		return fmt.Errorf("the Mooring controller %s last renewed Lease %s/%s %v ago: it is not running", m.Holder, ns, name, m.RenewedAgo.Round(time.Second))
	case !m.Published:
		return fmt.Errorf("the Mooring controller %s publishes no %s on Lease %s/%s (older than this mooring, or not leading yet): cannot tell whether it runs with --adopt-only", m.Holder, controller.AnnotationAdoptOnly, ns, name)
	case !m.AdoptOnly:
		return fmt.Errorf("the Mooring controller %s runs without --adopt-only (Lease %s/%s): it would write the Services MetalLB still serves; restart it with --adopt-only", m.Holder, ns, name)
	}
	return nil
}

func (r *Runner) speakersGone(ctx context.Context) error {
	pods, err := r.CS.CoreV1().Pods(r.Facts.MetalLBNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var running []string
	for _, p := range pods.Items {
		for _, o := range p.OwnerReferences {
			if o.Kind == "DaemonSet" && slices.Contains(r.Facts.Speakers, o.Name) && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				running = append(running, p.Name)
			}
		}
	}
	if len(running) > 0 {
		return fmt.Errorf("speaker pods still running: %s", strings.Join(running, ", "))
	}
	return nil
}

// MarshalPlan renders steps as JSON (for -o json).
func MarshalPlan(steps []migrate.Step) ([]byte, error) { return json.MarshalIndent(steps, "", "  ") }
