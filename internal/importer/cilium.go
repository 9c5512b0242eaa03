package importer

import (
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cilium source types: CiliumLoadBalancerIPPool (cilium.io/v2alpha1 with
// the older "cidrs" list, and v2 with "blocks") and
// CiliumL2AnnouncementPolicy.

type ciliumBlockIn struct {
	CIDR  string `json:"cidr"`
	Start string `json:"start"`
	Stop  string `json:"stop"`
}

type ciliumPool struct {
	Spec struct {
		Blocks            []ciliumBlockIn       `json:"blocks"`
		CIDRs             []ciliumBlockIn       `json:"cidrs"`
		ServiceSelector   *metav1.LabelSelector `json:"serviceSelector"`
		AllowFirstLastIPs string                `json:"allowFirstLastIPs"`
		Disabled          bool                  `json:"disabled"`
	} `json:"spec"`
}

type ciliumL2Policy struct {
	Spec struct {
		ServiceSelector *metav1.LabelSelector `json:"serviceSelector"`
		NodeSelector    *metav1.LabelSelector `json:"nodeSelector"`
		Interfaces      []string              `json:"interfaces"`
		ExternalIPs     bool                  `json:"externalIPs"`
		LoadBalancerIPs bool                  `json:"loadBalancerIPs"`
	} `json:"spec"`
}

var ciliumBlockFields = fields{"[]": {"cidr": leaf, "start": leaf, "stop": leaf}}

var ciliumPoolFields = fields{
	"blocks": ciliumBlockFields, "cidrs": ciliumBlockFields, "serviceSelector": leaf,
	"allowFirstLastIPs": leaf, "disabled": leaf,
}

var ciliumL2Fields = fields{
	"serviceSelector": leaf, "nodeSelector": leaf, "interfaces": leaf, "externalIPs": leaf, "loadBalancerIPs": leaf,
}

// Cilium's virtual Service labels and Mooring's.
var ciliumVirtualLabels = map[string]string{
	"io.kubernetes.service.namespace": "mooring.dev/service-namespace",
	"io.kubernetes.service.name":      "mooring.dev/service-name",
}

// Cilium imports Cilium LB-IPAM pools and L2 announcement policies. Other
// kinds are reported, never silently skipped. A malformed object fails the
// import with an *InputError naming the file, the object and the field.
func Cilium(inputs []Input) (*Result, error) {
	objs, err := decodeAll(inputs)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	names := map[string]bool{}
	for _, o := range objs {
		rec := recorder{rep: &res.Report, src: o.src, kind: o.kind, obj: o.ref()}
		key := o.kind + "/" + o.name
		if names[key] {
			return nil, o.errorf("metadata.name", "a second %s named %q: cluster-scoped names must be unique", o.kind, o.name)
		}
		names[key] = true
		switch {
		case o.group() != "cilium.io":
			rec.notMapped("", "not a Cilium object (apiVersion %s): not imported", o.apiVersion)
		case o.kind == "CiliumLoadBalancerIPPool":
			p, err := ciliumPoolOf(o, rec)
			if err != nil {
				return nil, err
			}
			res.Pools = append(res.Pools, p)
		case o.kind == "CiliumL2AnnouncementPolicy":
			p, err := ciliumPolicyOf(o, rec)
			if err != nil {
				return nil, err
			}
			res.Policies = append(res.Policies, p)
		case strings.HasPrefix(o.kind, "CiliumBGP"):
			rec.notMapped("", "Cilium's BGP objects are not imported (%s %q): write Mooring's BGPPeer and BGPAdvertisement by hand (docs/bgp.md maps Cilium's fields)", o.kind, o.ref())
		default:
			rec.notMapped("", "Cilium kind %s is not about LB-IPAM or L2 announcements: not imported", o.kind)
		}
	}
	return res, nil
}

func ciliumPoolOf(o *object, rec recorder) (Pool, error) {
	var in ciliumPool
	if err := o.decodeInto(&in); err != nil {
		return Pool{}, err
	}
	reportUnknown(rec, o, ciliumPoolFields)
	p := newPool(o.name, fmt.Sprintf("cilium %s %s (%s)", o.apiVersion, o.ref(), o.src.file))
	target := "LoadBalancerIPPool " + o.name
	type blk struct {
		field string
		b     ciliumBlockIn
	}
	var blocks []blk
	for i, b := range in.Spec.CIDRs {
		blocks = append(blocks, blk{fmt.Sprintf("spec.cidrs[%d]", i), b})
	}
	for i, b := range in.Spec.Blocks {
		blocks = append(blocks, blk{fmt.Sprintf("spec.blocks[%d]", i), b})
	}
	if len(blocks) == 0 {
		return Pool{}, o.errorf("spec.blocks", "a pool needs at least one block")
	}
	for i, b := range blocks {
		out, _, note, err := ciliumBlock(b.b.CIDR, b.b.Start, b.b.Stop)
		if err != nil {
			return Pool{}, o.errorf(b.field, "%v", err)
		}
		p.Spec.Blocks = append(p.Spec.Blocks, out)
		bt := fmt.Sprintf("%s spec.blocks[%d]", target, i)
		switch {
		case note != "":
			rec.changed(b.field, bt, "%s", note)
		case strings.HasPrefix(b.field, "spec.cidrs"):
			rec.changed(b.field, bt, "the deprecated cidrs list is read as blocks, as Cilium does")
		default:
			rec.mapped(b.field, bt, "")
		}
	}
	switch in.Spec.AllowFirstLastIPs {
	case "No":
		rec.mapped("spec.allowFirstLastIPs", target+" spec.allowFirstLastIPs",
			"No: the first and last address of each CIDR of /30 (/126) and larger are not handed out (Mooring's default)")
	case "Yes", "":
		p.Spec.AllowFirstLastIPs = true
		what := "Yes"
		if in.Spec.AllowFirstLastIPs == "" {
			what = "unset (Cilium then hands them out)"
		}
		rec.changed("spec.allowFirstLastIPs", target+" spec.allowFirstLastIPs",
			"%s: set to true, because Mooring's default is the opposite of Cilium's", what)
	default:
		return Pool{}, o.errorf("spec.allowFirstLastIPs", "%q: want Yes or No", in.Spec.AllowFirstLastIPs)
	}
	if in.Spec.Disabled {
		p.Spec.Disabled = true
		rec.mapped("spec.disabled", target+" spec.disabled", "no new addresses; Services keep the ones they hold")
	}
	if in.Spec.ServiceSelector != nil {
		sel, note := ciliumSelector(in.Spec.ServiceSelector)
		p.Spec.ServiceSelector = sel
		if note != "" {
			rec.changed("spec.serviceSelector", target+" spec.serviceSelector", "%s", note)
		} else {
			rec.mapped("spec.serviceSelector", target+" spec.serviceSelector", "")
		}
	}
	return p, nil
}

// ciliumSelector copies a Service selector, renaming Cilium's virtual
// namespace/name labels to Mooring's.
func ciliumSelector(s *metav1.LabelSelector) (*metav1.LabelSelector, string) {
	out := s.DeepCopy()
	var renamed []string
	if len(out.MatchLabels) > 0 {
		ml := map[string]string{}
		for k, v := range out.MatchLabels {
			if m, ok := ciliumVirtualLabels[k]; ok {
				renamed = append(renamed, k+" -> "+m)
				k = m
			}
			ml[k] = v
		}
		out.MatchLabels = ml
	}
	for i, e := range out.MatchExpressions {
		if m, ok := ciliumVirtualLabels[e.Key]; ok {
			renamed = append(renamed, e.Key+" -> "+m)
			out.MatchExpressions[i].Key = m
		}
	}
	if len(out.MatchLabels) == 0 && len(out.MatchExpressions) == 0 {
		return nil, ""
	}
	if len(renamed) > 0 {
		return out, "Cilium's virtual Service labels renamed to Mooring's: " + strings.Join(renamed, ", ")
	}
	return out, ""
}

func ciliumPolicyOf(o *object, rec recorder) (L2Policy, error) {
	var in ciliumL2Policy
	if err := o.decodeInto(&in); err != nil {
		return L2Policy{}, err
	}
	reportUnknown(rec, o, ciliumL2Fields)
	p := newPolicy(o.name, fmt.Sprintf("cilium %s %s (%s)", o.apiVersion, o.ref(), o.src.file))
	target := "L2AnnouncementPolicy " + o.name
	if in.Spec.ServiceSelector != nil {
		sel, note := ciliumSelector(in.Spec.ServiceSelector)
		p.Spec.ServiceSelector = sel
		if note != "" {
			rec.changed("spec.serviceSelector", target+" spec.serviceSelector", "%s", note)
		} else {
			rec.mapped("spec.serviceSelector", target+" spec.serviceSelector", "")
		}
	}
	if in.Spec.NodeSelector != nil {
		p.Spec.NodeSelector = nonEmpty(*in.Spec.NodeSelector)
		rec.mapped("spec.nodeSelector", target+" spec.nodeSelector", "")
	}
	for i, re := range in.Spec.Interfaces {
		if _, err := regexp.Compile(re); err != nil {
			return L2Policy{}, o.errorf(fmt.Sprintf("spec.interfaces[%d]", i), "%q is not a regular expression: %v", re, err)
		}
		// Cilium matches unanchored (regexp.MatchString); Mooring anchors.
		p.Spec.Interfaces = append(p.Spec.Interfaces, ".*(?:"+re+").*")
		rec.changed(fmt.Sprintf("spec.interfaces[%d]", i), target+fmt.Sprintf(" spec.interfaces[%d]", i),
			"%q written as %q: Cilium matches anywhere in the name, Mooring anchors at both ends", re, ".*(?:"+re+").*")
	}
	if len(in.Spec.Interfaces) == 0 {
		rec.changed("spec.interfaces", target+" spec.interfaces", "unset: Cilium answers on its selected devices, Mooring on every interface but loopback; list the interfaces if that matters")
	}
	p.Spec.LoadBalancerIPs = ptr(in.Spec.LoadBalancerIPs)
	p.Spec.ExternalIPs = in.Spec.ExternalIPs
	rec.mapped("spec.loadBalancerIPs", target+" spec.loadBalancerIPs", "%v (set explicitly: Cilium's default is false, Mooring's true)", in.Spec.LoadBalancerIPs)
	rec.mapped("spec.externalIPs", target+" spec.externalIPs", "%v", in.Spec.ExternalIPs)
	return p, nil
}
