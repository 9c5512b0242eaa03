package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/migrate"
)

// The BGP hand-over (migrate.planBGP): MetalLB's speakers pinned to
// labelled nodes, Mooring's BGPPeers kept off them, one node at a time.

// SpeakerPods are the running pods of MetalLB's speaker DaemonSets,
// name → UID, and the nodes they run on, sorted.
func SpeakerPods(ctx context.Context, cs kubernetes.Interface, ns string, speakers []string) (map[string]string, []string, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods in %s: %w", ns, err)
	}
	uids := map[string]string{}
	var nodes []string
	for _, p := range runningSpeakers(pods.Items, speakers) {
		uids[p.Name] = string(p.UID)
		if p.Spec.NodeName != "" && !slices.Contains(nodes, p.Spec.NodeName) {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	slices.Sort(nodes)
	return uids, nodes, nil
}

// runningSpeakers are the pods of the speaker DaemonSets not finished.
func runningSpeakers(pods []corev1.Pod, speakers []string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		if slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "DaemonSet" && slices.Contains(speakers, o.Name) }) {
			out = append(out, p)
		}
	}
	return out
}

// pinSpeakers labels every node running a speaker, then pins the speaker
// DaemonSets to the label with updateStrategy OnDelete (no pod restarts).
func (r *Runner) pinSpeakers(ctx context.Context) error {
	for _, n := range r.Facts.SpeakerNodes {
		if err := r.labelNode(ctx, n, true); err != nil {
			return err
		}
	}
	patch := fmt.Sprintf(`{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},"template":{"spec":{"nodeSelector":{%q:"on"}}}}}`, migrate.SpeakerLabel)
	for _, s := range r.Facts.Speakers {
		if _, err := r.CS.AppsV1().DaemonSets(r.Facts.MetalLBNamespace).Patch(ctx, s, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("pinning DaemonSet %s to %s: %w", s, migrate.SpeakerLabel, err)
		}
		fmt.Fprintf(r.Out, "  DaemonSet %s/%s: nodeSelector %s=on, updateStrategy OnDelete\n", r.Facts.MetalLBNamespace, s, migrate.SpeakerLabel)
	}
	return nil
}

// labelNode sets (on) or removes the speaker label on node.
func (r *Runner) labelNode(ctx context.Context, node string, on bool) error {
	val, verb := `"on"`, "labelled "+migrate.SpeakerLabel+"=on"
	if !on {
		val, verb = "null", "label "+migrate.SpeakerLabel+" removed"
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, migrate.SpeakerLabel, val)
	if _, err := r.CS.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	fmt.Fprintf(r.Out, "  node %s: %s\n", node, verb)
	return nil
}

// keptOffSpeakers returns a copy of a BGPPeer whose node selectors also
// require the speaker label absent (each term, or one term when none).
func keptOffSpeakers(o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	var spec mooringv1.BGPPeerSpec
	m, _, _ := unstructured.NestedMap(o.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		return nil, fmt.Errorf("BGPPeer %s: %w", o.GetName(), err)
	}
	req := metav1.LabelSelectorRequirement{Key: migrate.SpeakerLabel, Operator: metav1.LabelSelectorOpDoesNotExist}
	if len(spec.NodeSelectors) == 0 {
		spec.NodeSelectors = []metav1.LabelSelector{{}}
	}
	var sels []any
	for _, s := range spec.NodeSelectors {
		s.MatchExpressions = append(slices.Clone(s.MatchExpressions), req)
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
		if err != nil {
			return nil, err
		}
		sels = append(sels, u)
	}
	c := o.DeepCopy()
	if err := unstructured.SetNestedSlice(c.Object, sels, "spec", "nodeSelectors"); err != nil {
		return nil, err
	}
	return c, nil
}

// bgpMode reports whether the plan hands over BGP sessions.
func (r *Runner) bgpMode() bool { return len(r.Facts.BGPPeers) > 0 }

// speakersKept checks every speaker pod recorded before the migration
// still runs, the same pod.
func (r *Runner) speakersKept(ctx context.Context) error {
	now, _, err := SpeakerPods(ctx, r.CS, r.Facts.MetalLBNamespace, r.Facts.Speakers)
	if err != nil {
		return err
	}
	var gone []string
	for name, uid := range r.SpeakerPodUIDs {
		if now[name] != uid {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		return finalError{fmt.Errorf("MetalLB speaker pods %s stopped or were replaced before their node's turn: their sessions were reset; check the DaemonSet's updateStrategy (OnDelete) and nodeSelector", strings.Join(gone, ", "))}
	}
	return nil
}

// bgpNodeHandedOver checks node runs no speaker and its BGPSpeaker shows
// every session Established.
func (r *Runner) bgpNodeHandedOver(ctx context.Context, node string) error {
	pods, err := r.CS.CoreV1().Pods(r.Facts.MetalLBNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range runningSpeakers(pods.Items, r.Facts.Speakers) {
		if p.Spec.NodeName == node {
			return fmt.Errorf("MetalLB's speaker %s still runs on %s", p.Name, node)
		}
	}
	u, err := r.DC.Resource(mooringv1.GroupVersion.WithResource("bgpspeakers")).Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no BGPSpeaker %s: is Mooring's agent on %s running with --bgp?", node, node)
	}
	if err != nil {
		return err
	}
	var sp mooringv1.BGPSpeaker
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sp); err != nil {
		return err
	}
	if len(sp.Status.Peers) == 0 {
		return fmt.Errorf("BGPSpeaker %s lists no session: no BGPPeer selects %s yet", node, node)
	}
	for _, p := range sp.Status.Peers {
		if p.State != mooringv1.BGPStateEstablished {
			return fmt.Errorf("%s's session with %s (%s) is %s: %s %s", node, p.Name, p.PeerAddress, p.State, p.Reason, p.Message)
		}
	}
	return nil
}
