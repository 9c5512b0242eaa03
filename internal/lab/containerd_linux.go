package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/mooringlb/mooring/internal/lab/realnode"
)

// realNodes is the lab's part of the real runtime: each node's plan, the
// images they import and the host-wide state they share.
type realNodes struct {
	nodes  map[string]*realnode.Node
	images []labImage
	host   realnode.Host
	nsent  string // nsenter's path
}

// prepareRealNodes, before any process: registers the lab with the host
// (sysctls a kubelet needs, mount points), writes the apiserver's kubelet
// client certificate, and plans every node.
func (c *Cluster) prepareRealNodes() error {
	imgs, err := c.cfg.labImages()
	if err != nil {
		return err
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return err
	}
	r := &realNodes{nodes: map[string]*realnode.Node{}, images: imgs, nsent: nsenter,
		host: realnode.Host{ID: c.paths.Dir, PID: os.Getpid()}}
	c.real = r
	if err := r.host.Acquire(realnode.MountPoints()); err != nil {
		return fmt.Errorf("lab: preparing the host for real nodes: %w", err)
	}
	// A lab that was SIGKILLed left its empty cgroup tree behind.
	if gone, err := realnode.SweepCgroups(labCgroupPrefix); err != nil {
		c.log.Warn("removing the cgroups of labs that never went down", "removed", gone, "err", err)
	} else if len(gone) > 0 {
		c.log.Info("removed the empty cgroups of labs that never went down", "cgroups", gone)
	}
	if err := c.pki.writeKubeletClient(); err != nil {
		return err
	}
	server := "https://" + c.cp.Addr4.String() + ":" + strconv.Itoa(APIServerPort)
	for _, n := range c.nodes {
		rn := realNodePlan(&c.cfg, c.paths, c.pki, labCgroupTop(), n, imgs[0].Ref())
		if err := rn.Validate(); err != nil {
			return err
		}
		if err := c.writeRealNodeFiles(rn, server); err != nil {
			return err
		}
		r.nodes[n.Name] = rn
	}
	return nil
}

// writeRealNodeFiles writes a node's disk: configuration, identity, CNI
// network and plugins, and creates its cgroup parent.
func (c *Cluster) writeRealNodeFiles(rn *realnode.Node, server string) error {
	for _, b := range rn.Binds() {
		if err := os.MkdirAll(b.Source, 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(rn.VolumePluginDir(), 0o755); err != nil {
		return err
	}
	files := map[string]string{
		rn.ContainerdConfig(): rn.ContainerdTOML(),
		rn.KubeletConfig():    rn.KubeletYAML(),
	}
	if cl := rn.NetworkConfList(); cl != "" {
		files[filepath.Join(bindSource(rn, realnode.CNIConfDir), realnode.ConfListName)] = cl
	}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return err
		}
	}
	bin := bindSource(rn, realnode.CNIBinDir)
	for _, p := range []string{"bridge", "host-local", "loopback", "ptp"} {
		if err := copyFile(filepath.Join(rn.CNIPlugins, p), filepath.Join(bin, p), 0o755); err != nil {
			return fmt.Errorf("lab: %s: CNI plugin %s: %w", rn.Name, p, err)
		}
	}
	if err := c.pki.writeNodeKubeconfig(rn.Kubeconfig, server, rn.Name); err != nil {
		return err
	}
	return realnode.CreateCgroup(rn.CgroupParent)
}

// bindSource is the node's private folder behind a host path.
func bindSource(rn *realnode.Node, target string) string {
	for _, b := range rn.Binds() {
		if b.Target == target {
			return b.Source
		}
	}
	panic("realnode: no bind for " + target)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// latestPID is the PID of the newest process called name.
func (c *Cluster) latestPID(name string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].comp.Name == name {
			return c.procs[i].p.PID, nil
		}
	}
	return 0, fmt.Errorf("lab: no process %s", name)
}

// ctr runs ctr against the node's containerd.
func (c *Cluster) ctr(ctx context.Context, rn *realnode.Node, enter []string, args ...string) ([]byte, error) {
	argv := append(append(enter[:2:2], filepath.Join(rn.Containerd, "ctr")), rn.CtrArgs(args...)...)
	cmd := exec.CommandContext(ctx, c.real.nsent, argv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("lab: %s: ctr %s: %w: %s", rn.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// registered waits for the kubelet to register its Node, then adds the
// labels a kubelet may not set on itself under NodeRestriction
// (node-role.kubernetes.io/...) and starts kube-proxy: a kube-proxy that
// starts before its Node exists exits as soon as the Node appears ("NodeIPs
// changed for the node").
func (c *Cluster) registered(ctx context.Context, name string) {
	n, _ := c.node(name)
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		_, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return
	}
	if err := c.startComponent(kubeProxyComponent(&c.cfg, c.paths, n)); err != nil {
		c.log.Warn("starting kube-proxy", "node", name, "err", err)
	}
	restricted := map[string]string{}
	for k, v := range n.Labels {
		if !kubeletMaySet(k) {
			restricted[k] = v
		}
	}
	if len(restricted) == 0 {
		return
	}
	patch := `{"metadata":{"labels":{`
	first := true
	for k, v := range restricted {
		if !first {
			patch += ","
		}
		first = false
		patch += strconv.Quote(k) + ":" + strconv.Quote(v)
	}
	patch += "}}}"
	_ = poll(ctx, 200*time.Millisecond, func() (bool, error) {
		_, err := c.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err == nil || !apierrors.IsNotFound(err), nil
	})
}

// ImportImage side-loads a further Mooring image archive (`make image` of
// another commit) into the containerd of every running real node, as
// importImages did at boot, and returns its tag: the image.tag an upgrade
// (UpgradeChart) points the chart at. A node killed meanwhile misses it.
func (c *Cluster) ImportImage(ctx context.Context, archive string) (string, error) {
	if c.real == nil {
		return "", errors.New("lab: ImportImage needs real nodes (--runtime=containerd)")
	}
	tag, err := imageRef(archive)
	if err != nil {
		return "", fmt.Errorf("lab: %w: build it with `make image` and pass its dist/%s", err, mooringArchive)
	}
	for _, n := range c.nodes {
		c.mu.Lock()
		killed := c.killed[n.Name]
		c.mu.Unlock()
		if killed {
			continue
		}
		pid, err := c.latestPID("node-mounts/" + n.Name)
		if err != nil {
			return "", err
		}
		enter := []string{"--mount=/proc/" + strconv.Itoa(pid) + "/ns/mnt", "--"}
		if _, err := c.ctr(ctx, c.real.nodes[n.Name], enter, "images", "import", "--base-name", MooringRepository, archive); err != nil {
			return "", err
		}
	}
	return tag, nil
}

// killRealNode SIGKILLs every container of the node (its cgroup
// subtree), after the lab killed containerd, the kubelet and the mount
// namespace's holder.
func (c *Cluster) killRealNode(name string) error {
	if c.real == nil {
		return nil
	}
	n, err := realnode.KillCgroup(c.real.nodes[name].CgroupParent, 5*time.Second)
	if n > 0 {
		c.log.Info("killed the node's containers", "node", name, "processes", n)
	}
	return err
}

// closeRealNodes, after every process is gone: kills what is left in the
// nodes' cgroups, removes them, and gives back the host-wide state.
func (c *Cluster) closeRealNodes() error {
	if c.real == nil {
		return nil
	}
	var errs []error
	for _, rn := range c.real.nodes {
		_, err := realnode.KillCgroup(rn.CgroupParent, 5*time.Second)
		errs = append(errs, err, realnode.RemoveCgroup(rn.CgroupParent, ""))
	}
	errs = append(errs, realnode.RemoveCgroup(labCgroupTop(), ""), c.real.host.Release())
	return errors.Join(errs...)
}

// echoPod is the demo backend on node: the stand-in's marker image, or on
// real nodes the imported echo image, told its names by the downward API.
func (c *Cluster) echoPod(name, node string) *corev1.Pod {
	p := echoPod(name, node)
	if c.real == nil {
		return p
	}
	ct := &p.Spec.Containers[0]
	for _, img := range c.real.images {
		if img.Repository == labImagePrefix+"echo" {
			ct.Image = img.Ref()
		}
	}
	ct.ImagePullPolicy = corev1.PullNever
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	ct.Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")}, {Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
		{Name: "PORT", Value: strconv.Itoa(EchoPort)}}
	ct.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	return p
}
