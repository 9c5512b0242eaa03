package chart

import (
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mooringlb/mooring/internal/cli"
)

// agentPod renders the chart and returns the agent DaemonSet's pod spec.
func agentPod(t *testing.T, args ...string) map[string]any {
	t.Helper()
	objs := render(t, append([]string{"--set", "agent.gossipKey.value=" + testKey}, args...)...)
	spec, _, _ := unstructured.NestedMap(find(t, objs, "DaemonSet", "mooring-agent").Object, "spec", "template", "spec")
	return spec
}

// hostPaths maps each hostPath volume's name to its path.
func hostPaths(spec map[string]any) map[string]string {
	vols, _, _ := unstructured.NestedSlice(spec, "volumes")
	out := map[string]string{}
	for _, v := range vols {
		m := v.(map[string]any)
		if p := str(m, "hostPath", "path"); p != "" {
			out[m["name"].(string)] = p
		}
	}
	return out
}

// Pod IPAM off (the default): no init container and no CNI plugin folder,
// so LB-only installs touch nothing of the node's CNI.
func TestCNIPluginNotInstalledWhenPodIPAMOff(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "agent.cni.binDir=/usr/libexec/cni"},
		// The agent's socket empty disables pod IPAM as well.
		{"--set", "controller.flags.podIpamMode=multi-pool", "--set", "agent.flags.podIpamSocket="}} {
		spec := agentPod(t, args...)
		if ic, ok := spec["initContainers"]; ok {
			t.Errorf("%v: init containers %v, want none", args, ic)
		}
		if _, ok := hostPaths(spec)["cni-bin"]; ok {
			t.Errorf("%v: a cni-bin hostPath %v, want none", args, hostPaths(spec))
		}
	}
}

// Pod IPAM on: an init container copies the plugin from the image into the
// host's CNI folder, mounted where its --to points, and its command line is
// a real `mooring` command with those flags.
func TestCNIPluginInstalledWhenPodIPAMOn(t *testing.T) {
	for _, tc := range []struct {
		args []string
		dir  string
	}{
		{[]string{"--set", "controller.flags.podIpamMode=multi-pool"}, "/opt/cni/bin"},
		{[]string{"--set", "controller.flags.podIpamMode=kubernetes", "--set", "agent.cni.binDir=/usr/libexec/cni"}, "/usr/libexec/cni"},
	} {
		spec := agentPod(t, tc.args...)
		ics, _, _ := unstructured.NestedSlice(spec, "initContainers")
		if len(ics) != 1 {
			t.Fatalf("%v: %d init containers, want 1", tc.args, len(ics))
		}
		ic := ics[0].(map[string]any)
		if hp := hostPaths(spec); hp["cni-bin"] != tc.dir {
			t.Errorf("%v: hostPaths %v, want cni-bin at %s", tc.args, hp, tc.dir)
		}
		mounts, _, _ := unstructured.NestedSlice(ic, "volumeMounts")
		if len(mounts) != 1 || str(mounts[0].(map[string]any), "name") != "cni-bin" {
			t.Fatalf("%v: init container mounts %v, want cni-bin only", tc.args, mounts)
		}
		mountPath := str(mounts[0].(map[string]any), "mountPath")
		if m := mounts[0].(map[string]any); m["readOnly"] == true {
			t.Errorf("%v: cni-bin is mounted read-only", tc.args)
		}
		var args []string
		for _, a := range ic["args"].([]any) {
			args = append(args, a.(string))
		}
		root := cli.NewRootCommand(cli.Streams{})
		cmd, rest, err := root.Find(args)
		if err != nil || cmd.Name() != "install-cni" || cmd.Parent().Name() != "agent" {
			t.Fatalf("%v: init args %v are not `mooring agent install-cni`: %v", tc.args, args, err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatalf("init args %v: %v", args, err)
		}
		if to := cmd.Flags().Lookup("to").Value.String(); to != mountPath {
			t.Errorf("%v: --to=%s but the host folder is mounted at %s", tc.args, to, mountPath)
		}
		if from := cmd.Flags().Lookup("from").Value.String(); from != "/mooring-ipam" {
			t.Errorf("%v: --from=%s, want the image's /mooring-ipam", tc.args, from)
		}
		if img, agentImg := ic["image"], container(t, &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": spec}}}})["image"]; img != agentImg {
			t.Errorf("init image %v, agent image %v: want the same", img, agentImg)
		}
		sc, _ := ic["securityContext"].(map[string]any)
		caps, _ := sc["capabilities"].(map[string]any)
		if !reflect.DeepEqual(caps["drop"], []any{"ALL"}) || caps["add"] != nil || sc["readOnlyRootFilesystem"] != true {
			t.Errorf("init securityContext %v: want no capabilities and a read-only root", sc)
		}
		if hostPaths(spec)["ipam-socket"] == "" {
			t.Errorf("%v: the agent's socket folder is gone: %v", tc.args, hostPaths(spec))
		}
	}
}

// Pod IPAM on, the controller runs on its node's network and on not-ready
// nodes: the agents serve pod addresses only once it has recorded the mode,
// so a controller waiting for a pod address, or for a node whose network is
// ready (containerd asks mooring-ipam's CNI STATUS, which needs the agent),
// would wait for itself (the lab's real nodes stayed NotReady for 3 min:
// "NetworkPluginNotReady ... mooring-ipam: ... the Mooring agent is
// unreachable on /run/mooring/ipamd.sock"). Off, it is an ordinary pod.
func TestControllerHostNetworkWithPodIPAM(t *testing.T) {
	for _, tc := range []struct {
		mode string
		host bool
	}{{"off", false}, {"kubernetes", true}, {"cluster-pool", true}, {"multi-pool", true}} {
		objs := render(t, "--set", "agent.gossipKey.value="+testKey, "--set", "controller.flags.podIpamMode="+tc.mode)
		spec, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "mooring-controller").Object, "spec", "template", "spec")
		if got := spec["hostNetwork"] == true; got != tc.host {
			t.Errorf("mode %s: controller hostNetwork %v, want %v", tc.mode, got, tc.host)
		}
		if tc.host && spec["dnsPolicy"] != "ClusterFirstWithHostNet" {
			t.Errorf("mode %s: dnsPolicy %v, want ClusterFirstWithHostNet", tc.mode, spec["dnsPolicy"])
		}
		tols, _, _ := unstructured.NestedSlice(spec, "tolerations")
		notReady := slices.ContainsFunc(tols, func(v any) bool {
			m := v.(map[string]any)
			return m["key"] == "node.kubernetes.io/not-ready" && m["operator"] == "Exists" && m["effect"] == nil
		})
		if notReady != tc.host {
			t.Errorf("mode %s: tolerations %v: tolerates not-ready nodes %v, want %v", tc.mode, tols, notReady, tc.host)
		}
	}
}

// agent.cni.network set: the init container also writes the node's network
// into the host folder agent.cni.confDir, mounted where its --conf-dir
// points, on the agent's socket; its command line is a real `mooring agent
// install-cni` that accepts those flags.
func TestCNINetworkWrittenWhenAsked(t *testing.T) {
	spec := agentPod(t, "--set", "controller.flags.podIpamMode=cluster-pool", "--set", "agent.cni.network=bridge",
		"--set", "agent.cni.confDir=/etc/cni/conf.d", "--set", "agent.flags.podIpamSocket=/run/m/ipam.sock")
	if hp := hostPaths(spec); hp["cni-net"] != "/etc/cni/conf.d" {
		t.Fatalf("hostPaths %v, want cni-net at /etc/cni/conf.d", hp)
	}
	ics, _, _ := unstructured.NestedSlice(spec, "initContainers")
	ic := ics[0].(map[string]any)
	mounts := map[string]string{}
	vms, _, _ := unstructured.NestedSlice(ic, "volumeMounts")
	for _, m := range vms {
		mounts[str(m.(map[string]any), "name")] = str(m.(map[string]any), "mountPath")
	}
	var args []string
	for _, a := range ic["args"].([]any) {
		args = append(args, a.(string))
	}
	cmd, rest, err := cli.NewRootCommand(cli.Streams{}).Find(args)
	if err != nil || cmd.Name() != "install-cni" {
		t.Fatalf("init args %v: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("init args %v: %v", args, err)
	}
	if err := cmd.PreRunE(cmd, nil); err != nil {
		t.Fatalf("init args %v refused: %v", args, err)
	}
	flag := func(n string) string { return cmd.Flags().Lookup(n).Value.String() }
	if flag("network") != "bridge" || flag("conf-dir") != mounts["cni-net"] || flag("socket") != "/run/m/ipam.sock" {
		t.Errorf("init args %v, mounts %v: want --network=bridge, --conf-dir where cni-net is mounted, the agent's socket", args, mounts)
	}
	if spec := agentPod(t, "--set", "controller.flags.podIpamMode=cluster-pool"); hostPaths(spec)["cni-net"] != "" {
		t.Errorf("network unset: a cni-net hostPath %v, want none (the network config is the user's)", hostPaths(spec))
	}
}
