package podipamctl

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// syncPodCIDR keeps node.spec.podCIDR(s) truthful in cluster-pool mode
// (seed 002's trap: tools reading spec.podCIDR showed another range than
// the pods had). Empty → Mooring writes its blocks there (the field is
// write-once). Set and different → a Node condition and an Event, since
// Mooring cannot change it.
func (r *nodeReconciler) syncPodCIDR(ctx context.Context, node *corev1.Node, blocks []mooringv1.PodIPAMBlock) error {
	want := wantPodCIDRs(blocks, r.st.cfg)
	if want == nil {
		return nil // not every family has its block yet
	}
	have := node.Spec.PodCIDRs
	if len(have) == 0 && node.Spec.PodCIDR != "" {
		have = []string{node.Spec.PodCIDR}
	}
	if len(have) == 0 {
		if r.st.wrote("podcidr/"+node.Name, strings.Join(want, ",")) {
			return nil // written; the cache has not caught up yet
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.PodCIDR, node.Spec.PodCIDRs = want[0], want
		if err := r.c.Patch(ctx, node, patch); err != nil {
			return fmt.Errorf("write spec.podCIDRs of node %s: %w", node.Name, err)
		}
		r.st.remember("podcidr/"+node.Name, strings.Join(want, ","))
		return nil
	}
	same := samePrefixes(have, want)
	old := findNodeCondition(node.Status.Conditions, mooringv1.ConditionPodCIDRMismatch)
	if same && (old == nil || old.Status == corev1.ConditionFalse) {
		return nil
	}
	if !same && old != nil && old.Status == corev1.ConditionTrue {
		return nil
	}
	cond := corev1.NodeCondition{Type: mooringv1.ConditionPodCIDRMismatch, Status: corev1.ConditionFalse,
		Reason: "PodCIDRMatches", Message: "node.spec.podCIDRs matches Mooring's pod address blocks",
		LastHeartbeatTime: metav1.NewTime(time.Now()), LastTransitionTime: metav1.NewTime(time.Now())}
	if !same {
		cond.Status, cond.Reason = corev1.ConditionTrue, "PodCIDRDiffers"
		cond.Message = fmt.Sprintf("node.spec.podCIDRs is %s but Mooring's cluster-pool blocks are %s: pods get addresses from Mooring's blocks, so tools reading spec.podCIDR show the wrong range. "+
			"Stop kube-controller-manager from allocating node CIDRs (--allocate-node-cidrs=false) or use --pod-ipam-mode=kubernetes; spec.podCIDR cannot be changed on an existing Node",
			strings.Join(have, ","), strings.Join(want, ","))
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Status.Conditions = append(slices.DeleteFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == mooringv1.ConditionPodCIDRMismatch
	}), cond)
	if err := r.c.Status().Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("set %s on node %s: %w", cond.Type, node.Name, err)
	}
	if !same {
		r.rec.Eventf(node, nil, corev1.EventTypeWarning, "PodCIDRMismatch", "CompareBlocks", "%s", cond.Message)
	}
	return nil
}

// wantPodCIDRs is the node's first block per configured family, IPv4
// first; nil until every configured family has one.
func wantPodCIDRs(blocks []mooringv1.PodIPAMBlock, cfg Config) []string {
	var v4, v6 string
	for _, b := range blocks {
		p, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			continue
		}
		if p.Addr().Is4() && v4 == "" {
			v4 = b.CIDR
		} else if p.Addr().Is6() && v6 == "" {
			v6 = b.CIDR
		}
	}
	var out []string
	if len(cfg.ClusterPoolV4) > 0 {
		if v4 == "" {
			return nil
		}
		out = append(out, v4)
	}
	if len(cfg.ClusterPoolV6) > 0 {
		if v6 == "" {
			return nil
		}
		out = append(out, v6)
	}
	return out
}

func samePrefixes(a, b []string) bool {
	norm := func(xs []string) []string {
		out := make([]string, 0, len(xs))
		for _, x := range xs {
			if p, err := netip.ParsePrefix(x); err == nil {
				out = append(out, p.Masked().String())
			} else {
				out = append(out, x)
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(norm(a), norm(b))
}

func findNodeCondition(cs []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
