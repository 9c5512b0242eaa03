package controller

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/mooringlb/mooring/internal/podipamctl"
)

// podIPAMFlags are the pod IPAM flags of `mooring controller`.
type podIPAMFlags struct {
	mode                 string
	v4, v6               string
	maskV4, maskV6       int
	preAllocate, workers int
	deletedNodeGrace     time.Duration
}

func (p *podIPAMFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&p.mode, "pod-ipam-mode", "off", "pod IPAM mode, recorded in the cluster at first start: off, kubernetes, cluster-pool or multi-pool")
	fl.StringVar(&p.v4, "cluster-pool-ipv4-cidr", "", "cluster-pool: IPv4 CIDRs per-node blocks are cut from, comma-separated")
	fl.StringVar(&p.v6, "cluster-pool-ipv6-cidr", "", "cluster-pool: IPv6 CIDRs per-node blocks are cut from, comma-separated")
	fl.IntVar(&p.maskV4, "cluster-pool-ipv4-mask-size", 24, "cluster-pool: prefix length of each node's IPv4 block")
	fl.IntVar(&p.maskV6, "cluster-pool-ipv6-mask-size", 120, "cluster-pool: prefix length of each node's IPv6 block")
	fl.IntVar(&p.preAllocate, "pod-ipam-pre-allocate", podipamctl.DefaultPreAllocate, "multi-pool: addresses of the default pool every node holds before its first pod")
	fl.IntVar(&p.workers, "pod-ipam-workers", podipamctl.DefaultWorkers, "nodes reconciled concurrently by pod IPAM")
	fl.DurationVar(&p.deletedNodeGrace, "pod-ipam-deleted-node-grace", 0,
		"how long a deleted Node's pod address blocks stay reserved at most while pods still have addresses from them (0: until those pods are gone)")
}

func (p *podIPAMFlags) config() (podipamctl.Config, error) {
	mode, err := podipamctl.ParseMode(p.mode)
	if err != nil {
		return podipamctl.Config{}, err
	}
	parse := func(flag string, list string) ([]netip.Prefix, error) {
		var out []netip.Prefix
		for _, s := range strings.Split(list, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			pr, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: not a CIDR such as 10.244.0.0/16", flag, s)
			}
			out = append(out, pr)
		}
		return out, nil
	}
	c := podipamctl.Config{Mode: mode, MaskV4: p.maskV4, MaskV6: p.maskV6, PreAllocate: p.preAllocate, Workers: p.workers,
		DeletedNodeGrace: p.deletedNodeGrace}
	if c.ClusterPoolV4, err = parse("cluster-pool-ipv4-cidr", p.v4); err != nil {
		return c, err
	}
	if c.ClusterPoolV6, err = parse("cluster-pool-ipv6-cidr", p.v6); err != nil {
		return c, err
	}
	return c, nil
}
