package podipamctl

import (
	"fmt"
	"net/netip"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipam"
)

// poolOf converts a PodIPPool. Unparsable CIDRs (admission rejects them)
// become invalid prefixes, which Pool.Validate reports.
func poolOf(p *mooringv1.PodIPPool) podipam.Pool {
	out := podipam.Pool{Name: p.Name, Order: p.CreationTimestamp.UnixNano()}
	fam := func(f *mooringv1.PodIPPoolFamily) podipam.FamilySpec {
		if f == nil {
			return podipam.FamilySpec{}
		}
		fs := podipam.FamilySpec{MaskSize: int(f.MaskSize)}
		for _, c := range f.CIDRs {
			pr, _ := netip.ParsePrefix(c)
			fs.CIDRs = append(fs.CIDRs, pr)
		}
		return fs
	}
	out.V4, out.V6 = fam(p.Spec.IPv4), fam(p.Spec.IPv6)
	return out
}

// blocksOf reads a PodIPAMNode's recorded blocks.
func blocksOf(n *mooringv1.PodIPAMNode) ([]podipam.Block, error) {
	var out []podipam.Block
	for _, b := range n.Status.Blocks {
		p, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			return nil, fmt.Errorf("PodIPAMNode %s: block %q: %w", n.Name, b.CIDR, err)
		}
		pool := b.Pool
		if pool == "" {
			pool = DefaultPool
		}
		out = append(out, podipam.Block{Prefix: p, Pool: pool, Node: n.Name})
	}
	return out, nil
}

// statusBlocks orders blocks as recorded (oldest first) and appends new ones.
func statusBlocks(recorded []mooringv1.PodIPAMBlock, held []podipam.Block) []mooringv1.PodIPAMBlock {
	have := map[netip.Prefix]podipam.Block{}
	for _, b := range held {
		have[b.Prefix] = b
	}
	var out []mooringv1.PodIPAMBlock
	for _, r := range recorded {
		p, err := netip.ParsePrefix(r.CIDR)
		if b, ok := have[p]; err == nil && ok {
			out = append(out, mooringv1.PodIPAMBlock{Pool: b.Pool, CIDR: p.String()})
			delete(have, p)
		}
	}
	for _, b := range held {
		if _, ok := have[b.Prefix]; ok {
			out = append(out, mooringv1.PodIPAMBlock{Pool: b.Pool, CIDR: b.Prefix.String()})
		}
	}
	return out
}
