package cni_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mooringlb/mooring/internal/ipamd"
)

func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func addrsOf(t *testing.T, r types.Result) []netip.Prefix {
	t.Helper()
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, ip := range res.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		ones, _ := ip.Address.Mask.Size()
		out = append(out, netip.PrefixFrom(a.Unmap(), ones))
	}
	return out
}

// TestCNIThroughLibcni drives mooring-ipam the way a container runtime
// does — libcni, the real bridge and loopback plugins, real pod network
// namespaces — through STATUS, ADD, CHECK, idempotent ADD, DEL, DEL of an
// unknown attachment and GC, and pings one pod from another over the
// bridge with the returned addresses and routes.
func TestCNIThroughLibcni(t *testing.T) {
	needRoot(t)
	bin := pluginDir(t)
	dir := t.TempDir()
	n := newNode(t, 1)
	cfg := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sock := filepath.Join(dir, "ipamd.sock")
	list := bridgeList(t, sock, "mbr0")
	lo := mustList(t, `{"cniVersion":"1.1.0","name":"lo","plugins":[{"type":"loopback"}]}`)
	call := func(fn func() error) error { return n.do(fn) }

	// STATUS: agent unreachable, then up without a block → 50; with a block → ok.
	if err := call(func() error { return cfg.GetStatusNetworkList(ctx, list) }); cniCode(err) != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS with no agent: %v (code %d), want code 50", err, cniCode(err))
	}
	ag := startAgent(t, dir, nil)
	defer func() { ag.stop() }()
	if err := call(func() error { return cfg.GetStatusNetworkList(ctx, list) }); cniCode(err) != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS with no block: %v, want code 50", err)
	}
	ag.alloc.SetPools(pools())
	if err := call(func() error { return cfg.GetStatusNetworkList(ctx, list) }); err != nil {
		t.Fatalf("STATUS with a block: %v", err)
	}

	// ADD two pods: dual-stack addresses inside the blocks, on eth0, with
	// default routes via the gateways.
	var podPaths []string
	var results []types.Result
	for i := range 2 {
		path := n.newPod(fmt.Sprintf("p%d", i))
		rt := runtimeConf(fmt.Sprintf("c%d", i), path)
		var r types.Result
		err := call(func() error {
			if _, err := cfg.AddNetworkList(ctx, lo, rt); err != nil {
				return err
			}
			var err error
			r, err = cfg.AddNetworkList(ctx, list, rt)
			return err
		})
		if err != nil {
			t.Fatalf("ADD pod %d: %v", i, err)
		}
		podPaths, results = append(podPaths, path), append(results, r)
		got := addrsOf(t, r)
		if len(got) != 2 || !netip.MustParsePrefix("10.244.7.0/24").Contains(got[0].Addr()) || !netip.MustParsePrefix("fd00:7::/120").Contains(got[1].Addr()) {
			t.Fatalf("pod %d addresses %v", i, got)
		}
		checkPodNetwork(t, path, got)
		if err := call(func() error { return cfg.CheckNetworkList(ctx, list, rt) }); err != nil {
			t.Fatalf("CHECK pod %d: %v", i, err)
		}
	}
	p0, p1 := addrsOf(t, results[0]), addrsOf(t, results[1])
	if p0[0] == p1[0] || p0[1] == p1[1] {
		t.Fatalf("duplicate addresses %v %v", p0, p1)
	}
	if err := ping(t, podPaths[0], p1[0].Addr()); err != nil {
		t.Fatalf("pod 0 → pod 1 over the bridge: %v", err)
	}

	// ADD is idempotent for the same container and interface (the IPAM role
	// called directly, as a main plugin calls it on a retried ADD).
	ipamOnly, err := libcni.ConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"mooring","type":"mooring-ipam","ipam":{"type":"mooring-ipam","socket":%q}}`, sock)))
	if err != nil {
		t.Fatal(err)
	}
	rt0 := runtimeConf("c0", podPaths[0])
	var again types.Result
	if err := call(func() error { var err error; again, err = cfg.AddNetwork(ctx, ipamOnly, rt0); return err }); err != nil {
		t.Fatalf("repeated ADD: %v", err)
	}
	if fmt.Sprint(addrsOf(t, again)) != fmt.Sprint(p0) {
		t.Fatalf("repeated ADD gave %v, first ADD %v", addrsOf(t, again), p0)
	}

	// DEL, then DEL again and DEL of something never added: all succeed.
	rt1 := runtimeConf("c1", podPaths[1])
	for _, rt := range []*libcni.RuntimeConf{rt1, rt1, runtimeConf("never-added", podPaths[1])} {
		if err := call(func() error { return cfg.DelNetworkList(ctx, list, rt) }); err != nil {
			t.Fatalf("DEL %s: %v", rt.ContainerID, err)
		}
	}
	if _, err := ag.alloc.Get(ipamd.Key{Network: "mooring", ContainerID: "c1", IfName: "eth0"}); !errors.Is(err, ipamd.ErrNotFound) {
		t.Fatalf("after DEL the allocation is still there: %v", err)
	}

	// GC: an allocation the runtime no longer knows (its ADD crashed before
	// the runtime cached it) is freed; the valid attachment stays.
	leaked, err := ag.alloc.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{Network: "mooring", ContainerID: "crashed", IfName: "eth0"}})
	if err != nil {
		t.Fatal(err)
	}
	gc := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "c0", IfName: "eth0"}}}
	if err := call(func() error { return cfg.GCNetworkList(ctx, list, gc) }); err != nil {
		t.Fatalf("GC: %v", err)
	}
	all := ag.alloc.All()
	if len(all) != 1 || all[0].ContainerID != "c0" {
		t.Fatalf("after GC: %+v (leaked %v should be gone)", all, leaked.IPs)
	}

	// Agent gone: STATUS says 50 again; ADD says try again later (11).
	ag.stop()
	ag = startAgent(t, dir, nil) // restarted, no block known yet
	if err := call(func() error { return cfg.GetStatusNetworkList(ctx, list) }); cniCode(err) != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS after restart without blocks: %v", err)
	}
	if got := ag.alloc.All(); len(got) != 1 || got[0].ContainerID != "c0" {
		t.Fatalf("restart lost or invented allocations: %+v", got)
	}
	if _, err := ipamd.NewClient(filepath.Join(dir, "nothing.sock")).Add(ctx, ipamd.AddRequest{}); err == nil {
		t.Fatal("a client on a missing socket succeeded")
	}
}

// checkPodNetwork reads eth0's addresses and the default routes inside
// the pod's namespace.
func checkPodNetwork(t *testing.T, path string, want []netip.Prefix) {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	have := map[netip.Prefix]bool{}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		have[netip.PrefixFrom(ip.Unmap(), ones)] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Fatalf("eth0 lacks %s (has %v)", w, have)
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.RouteList(link, fam)
		if err != nil {
			t.Fatal(err)
		}
		def := false
		for _, r := range routes {
			if r.Gw != nil && (r.Dst == nil || r.Dst.IP.IsUnspecified()) {
				def = true
			}
		}
		if !def {
			t.Fatalf("no default route of family %d in the pod: %v", fam, routes)
		}
	}
}
