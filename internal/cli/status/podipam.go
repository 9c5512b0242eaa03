package status

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// PodIPAM is pod IPAM as status shows it: the mode recorded in the
// cluster and, per node, its blocks, node.spec.podCIDRs and what is wrong.
type PodIPAM struct {
	Mode  string        `json:"mode"`
	Nodes []PodIPAMNode `json:"nodes"`
}

// PodIPAMNode is one node's pod IPAM.
type PodIPAMNode struct {
	Node     string         `json:"node"`
	Blocks   []PodIPAMBlock `json:"blocks,omitempty"`
	PodCIDRs []string       `json:"podCIDRs,omitempty"`
	// Problems are the Node's MooringPodCIDRMismatch and the PodIPAMNode's
	// conditions that are True (Exhausted, ...), "Type: message".
	Problems []string `json:"problems,omitempty"`
}

// PodIPAMBlock is a block of a pool held by a node.
type PodIPAMBlock struct {
	Pool string `json:"pool"`
	CIDR string `json:"cidr"`
}

// PodIPAMFromAPI reads pod IPAM through r: the mode recorded in namespace
// (the controller's), the Nodes and the PodIPAMNodes. With no mode
// recorded (off) it returns nil.
func PodIPAMFromAPI(r client.Reader, namespace string) func(context.Context) (*PodIPAM, error) {
	return func(ctx context.Context) (*PodIPAM, error) {
		mode, err := podipamctl.RecordedMode(ctx, r, namespace)
		if err != nil {
			return nil, err
		}
		if mode == podipamctl.ModeOff {
			return nil, nil
		}
		var nodes corev1.NodeList
		if err := r.List(ctx, &nodes); err != nil {
			return nil, fmt.Errorf("listing Nodes: %w", err)
		}
		var recs mooringv1.PodIPAMNodeList
		if err := r.List(ctx, &recs); err != nil {
			return nil, fmt.Errorf("listing PodIPAMNodes: %w", err)
		}
		return podIPAMOf(string(mode), nodes.Items, recs.Items), nil
	}
}

// podIPAMOf joins Nodes and PodIPAMNodes by name, sorted by node.
func podIPAMOf(mode string, nodes []corev1.Node, recs []mooringv1.PodIPAMNode) *PodIPAM {
	byName := map[string]*PodIPAMNode{}
	get := func(name string) *PodIPAMNode {
		if byName[name] == nil {
			byName[name] = &PodIPAMNode{Node: name}
		}
		return byName[name]
	}
	for _, n := range nodes {
		pn := get(n.Name)
		pn.PodCIDRs = n.Spec.PodCIDRs
		for _, c := range n.Status.Conditions {
			if c.Type == mooringv1.ConditionPodCIDRMismatch && c.Status == corev1.ConditionTrue {
				pn.Problems = append(pn.Problems, string(c.Type)+": "+c.Message)
			}
		}
	}
	for _, rec := range recs {
		pn := get(rec.Name)
		for _, b := range rec.Status.Blocks {
			pn.Blocks = append(pn.Blocks, PodIPAMBlock{Pool: b.Pool, CIDR: b.CIDR})
		}
		for _, c := range rec.Status.Conditions {
			msg := c.Type + ": " + c.Message
			if c.Status == metav1.ConditionTrue && !slices.Contains(pn.Problems, msg) {
				pn.Problems = append(pn.Problems, msg)
			}
		}
	}
	out := &PodIPAM{Mode: mode, Nodes: []PodIPAMNode{}}
	for _, pn := range byName {
		out.Nodes = append(out.Nodes, *pn)
	}
	slices.SortFunc(out.Nodes, func(a, b PodIPAMNode) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// printPodIPAM writes the pod IPAM table after the Services'.
func printPodIPAM(w io.Writer, p *PodIPAM, wide bool) error {
	fmt.Fprintf(w, "\nPod IPAM: mode %s\n", p.Mode)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tBLOCKS\tNODE PODCIDRS\tPROBLEMS")
	for _, n := range p.Nodes {
		var blocks []string
		for _, b := range n.Blocks {
			blocks = append(blocks, b.Pool+"="+b.CIDR)
		}
		problems := strings.Join(n.Problems, "; ")
		if !wide && len(problems) > messageWidth {
			problems = problems[:messageWidth-3] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Node, orDash(strings.Join(blocks, ",")),
			orDash(strings.Join(n.PodCIDRs, ",")), orDash(problems))
	}
	return tw.Flush()
}
