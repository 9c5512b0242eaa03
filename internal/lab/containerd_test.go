package lab

import (
	"archive/tar"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRealNodeAPIServerArgs(t *testing.T) {
	k := &pki{dir: "/p", CACert: "/p/ca.crt"}
	in := []string{"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount", "--secure-port=6443"}
	got := realNodeAPIServerArgs(in, k)
	for _, want := range []string{"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--client-ca-file=/p/ca.crt", "--kubelet-client-certificate=/p/apiserver-kubelet-client.crt", "--secure-port=6443"} {
		if !slices.Contains(got, want) {
			t.Errorf("args %v lack %s", got, want)
		}
	}
	for _, gone := range []string{"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount"} {
		if slices.Contains(got, gone) {
			t.Errorf("args %v keep %s: real kubelets need the Node authorizer and pods their tokens", got, gone)
		}
	}
	if !slices.Equal(in, []string{"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount", "--secure-port=6443"}) {
		t.Error("the input was modified")
	}
}

// TestKubeletLabels: NodeRestriction refuses kubernetes.io labels a
// kubelet sets on itself (the kubelet would not start); the lab adds them.
func TestKubeletLabels(t *testing.T) {
	got := kubeletLabels(map[string]string{"node-role.kubernetes.io/worker": "", LabelL2: "true", "plain": "x", "k8s.io/x": "y"})
	if len(got) != 2 || got[LabelL2] != "true" || got["plain"] != "x" {
		t.Errorf("kubelet labels %v", got)
	}
}

func writeArchive(t *testing.T, path, index string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, e := range []struct{ name, body string }{{"oci-layout", "{}"}, {"index.json", index}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	f.Close()
}

func TestImageRef(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tar")
	writeArchive(t, good, `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"v1.2"}}]}`)
	if r, err := imageRef(good); err != nil || r != "v1.2" {
		t.Errorf("imageRef = %q, %v", r, err)
	}
	bad := filepath.Join(dir, "bad.tar")
	writeArchive(t, bad, `{"manifests":[{}]}`)
	if _, err := imageRef(bad); err == nil || !strings.Contains(err.Error(), "names no tag") {
		t.Errorf("an archive without a tag: %v", err)
	}
	if _, err := imageRef(filepath.Join(dir, "missing.tar")); err == nil {
		t.Error("a missing archive was accepted")
	}
}

func TestRealNodeChartArgs(t *testing.T) {
	args := []string{"template", "--set", "image.repository=mooring.dev/lab-mooring", "--set", "agent.gossipKey.value=k"}
	got := realNodeChartArgs(args, []labImage{{Repository: labImagePrefix + "echo", Tag: "e"}, {Repository: MooringRepository, Tag: "v9"}})
	s := strings.Join(got, " ")
	if !strings.Contains(s, "image.repository="+MooringRepository) || !strings.Contains(s, "--set-string image.tag=v9") || strings.Contains(s, "lab-mooring") {
		t.Errorf("chart args %q", s)
	}
}

func TestValidateRuntime(t *testing.T) {
	for name, c := range map[string]Config{
		"unknown":                      {Runtime: "docker"},
		"metallb without the chart":    {Runtime: RuntimeContainerd, MetalLB: "/m"},
		"metallb without its manifest": {Runtime: RuntimeContainerd, Install: InstallChart, MetalLB: t.TempDir()},
		"no binaries":                  {Runtime: RuntimeContainerd, Containerd: t.TempDir()},
		// The lab's own agents cannot serve a real node's /run/mooring.
		"pod IPAM without the chart": {Runtime: RuntimeContainerd, PodIPAM: PodIPAMClusterPool},
	} {
		if err := c.validateRuntime(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, r := range []string{"", RuntimeProcess} {
		if err := (&Config{Runtime: r}).validateRuntime(); err != nil {
			t.Errorf("runtime %q: %v", r, err)
		}
	}
}

// Pod IPAM on real nodes: the chart is rendered with the mode, the lab's
// CIDRs and grace, and the node's network to write (the chart's
// install-cni writes it and brings mooring-ipam; the lab writes none).
func TestRealNodePodIPAM(t *testing.T) {
	c := &Config{Runtime: RuntimeContainerd, Install: InstallChart, PodIPAM: PodIPAMClusterPool, PodNetwork: PodNetworkPTP}
	s := strings.Join(podIPAMChartArgs(c), " ")
	for _, want := range []string{"--set controller.flags.podIpamMode=cluster-pool", "--set controller.flags.clusterPoolIpv4Cidr=10.244.0.0/16",
		"--set controller.flags.clusterPoolIpv6Cidr=fd00:244::/112", "--set controller.flags.clusterPoolIpv4MaskSize=24",
		"--set agent.flags.podIpamReleaseGrace=1m0s", "--set agent.cni.network=ptp"} {
		if !strings.Contains(s, want) {
			t.Errorf("chart args %q lack %q", s, want)
		}
	}
	if got := podIPAMChartArgs(&Config{Runtime: RuntimeContainerd, Install: InstallChart}); got != nil {
		t.Errorf("pod IPAM off: chart args %q", got)
	}
	rn := realNodePlan(c, newPaths("/run/lab"), &pki{}, "/lab", nodeSpec{Name: "node-1", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, "pause:1")
	if rn.NetworkConfList() != "" || len(rn.PodCIDRs) != 0 || rn.Validate() != nil {
		t.Errorf("node network %q, pod CIDRs %v, %v: want none from the lab", rn.NetworkConfList(), rn.PodCIDRs, rn.Validate())
	}
}

// Beside MetalLB on real nodes the chart's controller only adopts and the
// agents leave MetalLB's speakers memberlist's port.
func TestRealNodeMetalLBChartArgs(t *testing.T) {
	c := &Config{Runtime: RuntimeContainerd, Install: InstallChart, MetalLB: "/m"}
	s := strings.Join(metallbChartArgs(c), " ")
	for _, want := range []string{"--set controller.flags.adoptOnly=true", "--set agent.flags.gossipPort=7947"} {
		if !strings.Contains(s, want) {
			t.Errorf("chart args %q lack %q", s, want)
		}
	}
	if got := metallbChartArgs(&Config{Runtime: RuntimeContainerd, Install: InstallChart}); got != nil {
		t.Errorf("without MetalLB: chart args %q", got)
	}
	imgs := metallbImages("/m")
	if len(imgs) != 2 || imgs[0].Repository != "quay.io/metallb/controller" || imgs[1].Archive != "/m/images/speaker.oci.tar" {
		t.Errorf("MetalLB's images %+v", imgs)
	}
}
