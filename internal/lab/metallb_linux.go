package lab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metallbPeriod is how often the supervisor compares MetalLB's DaemonSet
// and Deployment with the processes it runs.
const metallbPeriod = 250 * time.Millisecond

// installMetalLB installs MetalLB's CRDs, namespace, Deployment, DaemonSet
// and the lab's pool and L2Advertisement, then supervises the processes
// until ctx ends (see metallb.go). Real nodes install MetalLB's own
// manifest instead (metallb_real.go): their kubelets run it.
func (c *Cluster) installMetalLB(ctx context.Context) error {
	if c.real != nil {
		return c.installMetalLBManifest(ctx)
	}
	dir := filepath.Join(c.cfg.MetalLB, "crds")
	var crds []string
	var last error
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		crds, last = installCRDs(actx, c.dyn, dir)
		return last == nil, nil
	})
	if err == nil {
		err = poll(ctx, 50*time.Millisecond, func() (bool, error) {
			ok, err := crdsEstablished(ctx, c.dyn, crds)
			return ok && err == nil, nil
		})
	}
	if err != nil {
		return fmt.Errorf("lab: installing MetalLB's CRDs from %s (last error: %v): %w", dir, last, err)
	}
	if err := ensureNamespace(ctx, c.cs, MetalLBNamespace); err != nil {
		return err
	}
	dep, ds := metallbWorkloads()
	if _, err := c.cs.AppsV1().Deployments(MetalLBNamespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("lab: creating MetalLB's Deployment: %w", err)
	}
	if _, err := c.cs.AppsV1().DaemonSets(MetalLBNamespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("lab: creating MetalLB's DaemonSet: %w", err)
	}
	objs := metallbConfig()
	if c.bgp != nil {
		objs = metallbBGPConfig(c.bgp.router.Addr4, c.cfg.BGP.HoldTime)
	}
	for _, o := range objs {
		gvr := metallbGVR(o.GetKind())
		if _, err := c.dyn.Resource(gvr).Namespace(MetalLBNamespace).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("lab: creating MetalLB %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	c.progress("MetalLB installed")
	c.wg.Go(func() { c.superviseMetalLB(ctx) })
	return nil
}

// superviseMetalLB is the lab's DaemonSet/Deployment controller and
// kubelet for MetalLB: every metallbPeriod it starts what the workloads
// ask for and stops what they no longer ask for.
func (c *Cluster) superviseMetalLB(ctx context.Context) {
	secretDir := filepath.Join(c.paths.Dir, "metallb-memberlist")
	lastStart := map[string]time.Time{}
	t := time.NewTicker(metallbPeriod)
	defer t.Stop()
	for {
		if err := c.syncMetalLB(ctx, secretDir, lastStart); err != nil && ctx.Err() == nil {
			c.log.Debug("MetalLB supervisor", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Cluster) syncMetalLB(ctx context.Context, secretDir string, lastStart map[string]time.Time) error {
	type want struct {
		comp  component
		pod   func() *corev1.Pod
		ready func() bool
	}
	wants := map[string]want{}
	dep, err := c.cs.AppsV1().Deployments(MetalLBNamespace).Get(ctx, MetalLBController, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && dep.DeletionTimestamp == nil && (dep.Spec.Replicas == nil || *dep.Spec.Replicas > 0) {
		comp := metallbControllerComponent(&c.cfg, c.paths)
		owner := ownerRef("Deployment", dep.Name, string(dep.UID))
		wants[comp.Name] = want{comp: comp, pod: func() *corev1.Pod {
			return metallbPod(metallbControllerPod, "", dep.Spec.Template.Labels, dep.Spec.Template.Spec.Containers[0].Image, false, owner)
		}}
	}
	ds, err := c.cs.AppsV1().DaemonSets(MetalLBNamespace).Get(ctx, MetalLBSpeaker, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && ds.DeletionTimestamp == nil {
		owner := ownerRef("DaemonSet", ds.Name, string(ds.UID))
		// The Nodes' labels as registered, like the DaemonSet controller.
		nl, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		labels := map[string]map[string]string{}
		for _, n := range nl.Items {
			labels[n.Name] = n.Labels
		}
		c.mu.Lock()
		killed := maps.Clone(c.killed)
		c.mu.Unlock()
		for _, n := range c.nodes {
			l, registered := labels[n.Name]
			if killed[n.Name] || !registered || !selects(ds.Spec.Template.Spec.NodeSelector, l) {
				continue
			}
			comp := metallbSpeakerComponent(&c.cfg, c.paths, n, secretDir)
			wants[comp.Name] = want{comp: comp,
				pod: func() *corev1.Pod {
					return metallbPod(metallbSpeakerPod(n.Name), n.Name, ds.Spec.Template.Labels, ds.Spec.Template.Spec.Containers[0].Image, true, owner)
				},
				// The speakers read the memberlist key the controller
				// writes; a real DaemonSet's pods wait for the Secret's
				// volume the same way.
				ready: func() bool { return c.writeMLSecret(ctx, secretDir) == nil },
			}
		}
	}
	// Stop what is no longer wanted.
	for _, name := range c.metallbRunning() {
		if _, ok := wants[name]; ok {
			continue
		}
		_ = c.stopComponent(name, 5*time.Second)
		pod := metallbControllerPod
		if n := speakerNodeOf(name); n != "" {
			pod = metallbSpeakerPod(n)
		}
		if err := c.cs.CoreV1().Pods(MetalLBNamespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		c.log.Info("MetalLB process stopped: its workload no longer asks for it", "component", name)
	}
	// Start what is wanted and not running (a crashed one after 2 s).
	names := make([]string, 0, len(wants))
	for n := range wants {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		w := wants[name]
		if c.running(name) || time.Since(lastStart[name]) < 2*time.Second {
			continue
		}
		if w.ready != nil && !w.ready() {
			continue
		}
		if err := c.publishMetalLBPod(ctx, w.pod()); err != nil {
			return err
		}
		lastStart[name] = time.Now()
		if err := c.startComponent(w.comp); err != nil {
			return err
		}
		c.log.Info("MetalLB process started", "component", name)
	}
	return nil
}

// publishMetalLBPod creates (or replaces) the Pod of a process and marks it
// Running and Ready with the node's address.
func (c *Cluster) publishMetalLBPod(ctx context.Context, pod *corev1.Pod) error {
	pods := c.cs.CoreV1().Pods(MetalLBNamespace)
	old, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case err == nil && old.DeletionTimestamp == nil:
		pod = old
	case err == nil || apierrors.IsNotFound(err):
		if err == nil {
			if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if pod, err = pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("lab: creating MetalLB pod: %w", err)
		}
	default:
		return err
	}
	ip := c.cp.Addr4.String()
	for _, n := range c.nodes {
		if n.Name == pod.Spec.NodeName {
			ip = n.Addrs[0].String()
		}
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: ip, StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("lab: MetalLB pod %s status: %w", pod.Name, err)
	}
	return nil
}

// writeMLSecret copies the memberlist key from the Secret MetalLB's
// controller creates into dir (as the DaemonSet's Secret volume would).
func (c *Cluster) writeMLSecret(ctx context.Context, dir string) error {
	path := filepath.Join(dir, metallbMLSecretKey)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	s, err := c.cs.CoreV1().Secrets(MetalLBNamespace).Get(ctx, metallbMLSecret, metav1.GetOptions{})
	if err != nil {
		return err
	}
	key := s.Data[metallbMLSecretKey]
	if len(key) == 0 {
		return errors.New("memberlist secret has no key yet")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, key, 0o600)
}

// metallbRunning lists the MetalLB components with a live process.
func (c *Cluster) metallbRunning() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.procs {
		if p.comp.Name != "metallb-controller" && speakerNodeOf(p.comp.Name) == "" {
			continue
		}
		select {
		case <-p.p.Done():
		default:
			if !slices.Contains(out, p.comp.Name) {
				out = append(out, p.comp.Name)
			}
		}
	}
	return out
}

// running reports whether the named MetalLB component has a live process.
func (c *Cluster) running(name string) bool { return slices.Contains(c.metallbRunning(), name) }
