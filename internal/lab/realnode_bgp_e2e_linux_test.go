package lab_test

import (
	"context"
	"testing"
	"time"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// TestRealNodesBGPChart: `lab up --runtime=containerd --install=chart
// --bgp` — the chart's agents, run by a real kubelet and containerd with
// agent.flags.bgp=true (the value docs/bgp.md tells a user to set), peer
// with the lab's FRR router through the BGPPeer the lab creates (BFD,
// TCP-MD5 with the password Secret in the release namespace, which the
// chart's mooring-agent-bgp role lets the agents read): the chart's pods
// are Ready, the demo Service's addresses are one ECMP route over the
// three nodes in both families (zebra and the router's kernel), the
// routed client gets answers, BFD is Up on both ends, no chart log says
// "forbidden", and a hard kill's next hop is withdrawn by BFD and comes
// back after the restore.
func TestRealNodesBGPChart(t *testing.T) {
	cfg := requireRealNodes(t, lab.InstallChart)
	cfg.BGP = lab.BGPConfig{Enabled: true, BFD: true}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the BGP lab with the chart on real nodes: %v", err)
	}
	before := snapshotHost(t)
	r, stop := runRealLab(t, cfg)
	ctx := context.Background()
	cs := realClient(t, r)
	dyn := labDynamic(t, r)
	t.Run("chart pods Running and Ready", func(t *testing.T) { waitChartPodsReady(t, cs, 2*time.Minute) })
	router := r.Cluster.Router()
	nodes4, nodes6, vip4, vip6 := demoRoutes(t, r)
	waitNexthops(t, ctx, router, vip4, nodes4, time.Minute)
	waitNexthops(t, ctx, router, vip6, nodes6, time.Minute)
	checkKernelECMP(t, r.Cluster.Host(lab.RouterHost), vip4, nodes4)
	checkRoutedClient(t, r.Cluster.Host(netlab.ClientName), vip4.Addr())
	checkAnswers(t, ctx, r.Cluster.Host(netlab.ClientName), vip4.Addr())
	waitBFD(t, ctx, r, dyn, mooringv1.BFDStateUp, 0, time.Minute)
	t.Run("kubectl logs, no forbidden", func(t *testing.T) { checkRealLogs(t, cs) })
	// A real node's kill stops its containerd, kubelet and pods: BFD takes
	// the next hop out as in the process lab (bounds as TestLabBGPMooring).
	checkFailoverCLI(t, r, 1, 200*time.Millisecond, 3*time.Second)
	waitNexthops(t, ctx, router, vip4, nodes4, 3*time.Minute)
	stop()
	checkNothingLeft(t, cfg.StateDir)
	compareHost(t, before, snapshotHost(t))
}
