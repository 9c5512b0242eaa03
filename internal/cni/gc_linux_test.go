package cni_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/mooringlb/mooring/internal/ipamd"
)

// Issue 19 item 6, the way a runtime with Multus would do it: two networks
// use mooring-ipam on one node — "pods" (bridge mbr1, eth0) and "storage"
// (bridge mbr2, net1) — through libcni with the real reference plugins in real pod
// network namespaces. Each network's GC lists only its own attachments and
// never frees the other's addresses; a GC without the list frees nothing
// and says why.
func TestGCKeepsTheOtherNetworksAddresses(t *testing.T) {
	needRoot(t)
	bin := pluginDir(t)
	dir := t.TempDir()
	n := newNode(t, 1)
	cfg := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sock := filepath.Join(dir, "ipamd.sock")
	// mooring-ipam is also each list's last entry, as docs/podipam.md says
	// to install it: the reference bridge plugin does not pass GC on to
	// its IPAM plugin. The second network's default routes would collide
	// with the first's: it routes one prefix only.
	pods := mustList(t, fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","plugins":[
		{"type":"bridge","bridge":"mbr1","isGateway":true,"ipam":{"type":"mooring-ipam","socket":%q}},
		{"type":"mooring-ipam","socket":%q}]}`, sock, sock))
	storage := mustList(t, fmt.Sprintf(`{"cniVersion":"1.1.0","name":"storage","plugins":[
		{"type":"bridge","bridge":"mbr2","ipam":{"type":"mooring-ipam","socket":%q,"routes":[{"dst":"198.51.100.0/24"}]}},
		{"type":"mooring-ipam","socket":%q}]}`, sock, sock))
	ag := startAgent(t, dir, pools())
	defer func() { ag.stop() }()
	call := func(fn func() error) error { return n.do(fn) }

	// Two pods, each on both networks.
	var valid []types.GCAttachment
	for i := range 2 {
		path := n.newPod(fmt.Sprintf("m%d", i))
		id := fmt.Sprintf("multi-%d", i)
		for _, att := range []struct {
			list   *libcni.NetworkConfigList
			ifName string
		}{{pods, "eth0"}, {storage, "net1"}} {
			rt := runtimeConf(id, path)
			rt.IfName = att.ifName
			if err := call(func() error { _, err := cfg.AddNetworkList(ctx, att.list, rt); return err }); err != nil {
				t.Fatalf("ADD %s on %s: %v", id, att.list.Name, err)
			}
		}
		valid = append(valid, types.GCAttachment{ContainerID: id, IfName: "eth0"})
	}
	if got := networks(ag.alloc.All()); got != "pods:multi-0/eth0 pods:multi-1/eth0 storage:multi-0/net1 storage:multi-1/net1" {
		t.Fatalf("allocations %s", got)
	}

	// An allocation of storage the runtime never cached (its ADD crashed):
	// only the plugin's GC can free it.
	if _, err := ag.alloc.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{Network: "storage", ContainerID: "crashed", IfName: "net1"}}); err != nil {
		t.Fatal(err)
	}

	// The pods network's GC, listing its two attachments: storage's stay.
	if err := call(func() error { return cfg.GCNetworkList(ctx, pods, &libcni.GCArgs{ValidAttachments: valid}) }); err != nil {
		t.Fatalf("GC of pods: %v", err)
	}
	if got := networks(ag.alloc.All()); got != "pods:multi-0/eth0 pods:multi-1/eth0 storage:crashed/net1 storage:multi-0/net1 storage:multi-1/net1" {
		t.Fatalf("after the pods network's GC: %s", got)
	}
	// The storage network's GC, listing only multi-0: multi-1's storage
	// address goes (libcni DELs the attachment it cached; then the
	// plugin's GC), the pods network's stay.
	storageValid := []types.GCAttachment{{ContainerID: "multi-0", IfName: "net1"}}
	if err := call(func() error { return cfg.GCNetworkList(ctx, storage, &libcni.GCArgs{ValidAttachments: storageValid}) }); err != nil {
		t.Fatalf("GC of storage: %v", err)
	}
	if got := networks(ag.alloc.All()); got != "pods:multi-0/eth0 pods:multi-1/eth0 storage:multi-0/net1" {
		t.Fatalf("after both GCs: %s", got)
	}

	// A runtime's GC without cni.dev/valid-attachments (a fresh libcni
	// cache, so libcni itself DELs nothing first): nothing is freed, and
	// the error says why.
	empty := filepath.Join(dir, "empty-cache")
	if err := os.MkdirAll(empty, 0o755); err != nil { // libcni's GC does nothing without one
		t.Fatal(err)
	}
	bare := libcni.NewCNIConfigWithCacheDir([]string{bin}, empty, nil)
	err := call(func() error { return bare.GCNetworkList(ctx, pods, nil) })
	if err == nil || !strings.Contains(err.Error(), "no cni.dev/valid-attachments: nothing was freed") {
		t.Fatalf("GC without the list: %v, want an error saying nothing was freed", err)
	}
	if got := networks(ag.alloc.All()); got != "pods:multi-0/eth0 pods:multi-1/eth0 storage:multi-0/net1" {
		t.Fatalf("after a GC without the list: %s", got)
	}
}

func networks(als []ipamd.Allocation) string {
	var out []string
	for _, al := range als {
		out = append(out, al.Network+":"+al.ContainerID+"/"+al.IfName)
	}
	return strings.Join(out, " ")
}
