package lab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/restmapper"
)

// chartFieldManager owns the fields the lab applies from the chart.
const chartFieldManager = "mooring-lab"

// routeControlPlane gives the control-plane namespace a route to every
// node's pod CIDRs via that node: the chart's controller runs in a pod and
// reaches the apiserver (through the kubernetes Service) from its pod IP,
// which the apiserver must be able to answer.
func (c *Cluster) routeControlPlane() error {
	nl, err := c.cp.NetlinkHandle()
	if err != nil {
		return err
	}
	defer nl.Close()
	for _, n := range c.nodes {
		for i, p := range n.PodCIDRs {
			r := &netlink.Route{Dst: ipNet(p), Gw: n.Addrs[i].AsSlice()}
			if err := nl.RouteReplace(r); err != nil {
				return fmt.Errorf("lab: control plane: route to %s: %w", p, err)
			}
		}
	}
	return nil
}

// renderChart starts `helm template` (it needs no cluster) and returns a
// function that waits for its objects.
func (c *Cluster) renderChart(ctx context.Context) func() ([]*unstructured.Unstructured, error) {
	type result struct {
		objs []*unstructured.Unstructured
		err  error
	}
	ch := make(chan result, 1)
	key, err := newGossipKey()
	if err != nil {
		return func() ([]*unstructured.Unstructured, error) { return nil, err }
	}
	c.gossipKey = key
	go func() {
		objs, err := c.helmTemplate(ctx, key)
		ch <- result{objs, err}
	}()
	var r *result
	return func() ([]*unstructured.Unstructured, error) {
		if r == nil {
			v := <-ch
			r = &v
		}
		return r.objs, r.err
	}
}

// chartArgs are the `helm template` arguments of the lab's install, with
// key as the gossip key.
func (c *Cluster) chartArgs(key string) []string {
	args := helmTemplateArgs(c.cfg.ChartDir, key)
	if c.real != nil {
		args = realNodeChartArgs(args, c.real.images)
	}
	args = append(args, podIPAMChartArgs(&c.cfg)...)
	args = append(args, metallbChartArgs(&c.cfg)...)
	args = append(args, bgpChartArgs(&c.cfg)...)
	return args
}

// ChartValues are the values the lab installed the chart with, as helm
// arguments (`--set k=v` and `--set-string k=v` pairs: image.repository,
// image.tag, the gossip key): with them `helm upgrade --install` renders
// what the lab applied and adopts its objects (they carry Helm's
// ownership annotations), and a later `helm upgrade --reuse-values`
// keeps them. Empty without --install=chart.
func (c *Cluster) ChartValues() []string {
	if c.gossipKey == "" {
		return nil
	}
	var out []string
	args := c.chartArgs(c.gossipKey)
	for i, a := range args {
		if (a == "--set" || a == "--set-string") && i+1 < len(args) {
			out = append(out, a, args[i+1])
		}
	}
	return out
}

func (c *Cluster) helmTemplate(ctx context.Context, key string) ([]*unstructured.Unstructured, error) {
	cmd := exec.CommandContext(ctx, c.cfg.Helm, c.chartArgs(key)...)
	// helm's own folders go to the state dir: nothing in the user's home.
	home := filepath.Join(c.paths.Dir, "helm")
	cmd.Env = append(cmd.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("lab: helm template %s: %w\n%s", c.cfg.ChartDir, err, strings.TrimSpace(stderr.String()))
	}
	objs, err := decodeManifests(out.Bytes())
	if err != nil {
		return nil, err
	}
	c.log.Info("chart rendered", "chart", c.cfg.ChartDir, "objects", len(objs), "took", time.Since(start).Round(time.Millisecond))
	return objs, nil
}

// installChart applies the rendered chart server-side (CRDs, RBAC and
// accounts first, the workloads last), into ChartNamespace.
func (c *Cluster) installChart(ctx context.Context) error {
	objs, err := c.chart()
	if err != nil {
		return err
	}
	if err := ensureNamespace(ctx, c.cs, ChartNamespace); err != nil {
		return err
	}
	groups, err := restmapper.GetAPIGroupResources(c.cs.Discovery())
	if err != nil {
		return fmt.Errorf("lab: discovering the apiserver's resources: %w", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	objs = slices.Clone(objs)
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return applyRank(a) - applyRank(b) })
	for _, o := range objs {
		if err := c.applyObject(ctx, mapper, o); err != nil {
			return err
		}
	}
	c.progress(fmt.Sprintf("chart applied (%d objects)", len(objs)))
	return nil
}

// applyObject applies o server-side, retrying briefly: a fresh apiserver
// may still be building the handlers of a new API. o gets Helm's
// ownership annotations for ChartRelease, as `helm install` would set
// them, and the label Helm wants beside them (the chart's templates set it
// on most objects): `helm upgrade --install` adopts the lab's objects
// (ChartValues).
func (c *Cluster) applyObject(ctx context.Context, mapper meta.RESTMapper, o *unstructured.Unstructured) error {
	o = o.DeepCopy()
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann["meta.helm.sh/release-name"], ann["meta.helm.sh/release-namespace"] = ChartRelease, ChartNamespace
	o.SetAnnotations(ann)
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["app.kubernetes.io/managed-by"] = "Helm"
	o.SetLabels(labels)
	return c.apply(ctx, mapper, o, chartFieldManager, ChartNamespace, "the chart's")
}

// apply applies o server-side as fieldManager (in namespace ns when o is
// namespaced and names none), retrying briefly: a fresh apiserver may
// still be building the handlers of a new API. what names o's origin in
// errors.
func (c *Cluster) apply(ctx context.Context, mapper meta.RESTMapper, o *unstructured.Unstructured, fieldManager, ns, what string) error {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("lab: %s %s %s: %w", what, gvk.Kind, o.GetName(), err)
	}
	res := c.dyn.Resource(m.Resource)
	var last error
	err = poll(ctx, 200*time.Millisecond, func() (bool, error) {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			n := o.GetNamespace()
			if n == "" {
				n = ns
			}
			_, last = res.Namespace(n).Apply(actx, o.GetName(), o, opts)
		} else {
			_, last = res.Apply(actx, o.GetName(), o, opts)
		}
		if last != nil && (apierrors.IsInvalid(last) || apierrors.IsForbidden(last) || apierrors.IsBadRequest(last)) {
			return false, last
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("lab: applying %s %s %s (last error: %v): %w", what, gvk.Kind, o.GetName(), last, err)
	}
	return nil
}
