package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/restmapper"
)

// installMetalLBManifest installs MetalLB on real nodes as a user does:
// `kubectl apply` of its manifest (server-side, in the manifest's order:
// namespace, CRDs, RBAC, the webhook's Secret and Service, the controller
// Deployment, the speaker DaemonSet, the validating webhook), then the
// lab's IPAddressPool and L2Advertisement, which MetalLB's webhook admits
// once its controller serves (certificates rotated, pod Ready): retried
// until then.
func (c *Cluster) installMetalLBManifest(ctx context.Context) error {
	path := filepath.Join(c.cfg.MetalLB, metallbManifest)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("lab: MetalLB's manifest: %w", err)
	}
	objs, err := decodeManifests(b)
	if err != nil {
		return fmt.Errorf("lab: MetalLB's manifest %s: %w", path, err)
	}
	// The apiserver may not serve yet: this runs beside its start. The
	// manifest's kinds are all built in.
	var groups []*restmapper.APIGroupResources
	err = poll(ctx, 200*time.Millisecond, func() (bool, error) {
		groups, err = restmapper.GetAPIGroupResources(c.cs.Discovery())
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("lab: discovering the apiserver's resources: %w", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	for _, o := range objs {
		if err := c.apply(ctx, mapper, o, metallbFieldManager, MetalLBNamespace, "MetalLB's"); err != nil {
			return err
		}
	}
	c.progress(fmt.Sprintf("MetalLB's manifest applied (%d objects)", len(objs)))
	start := time.Now()
	for _, o := range metallbConfig() {
		var last error
		err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, last = c.dyn.Resource(metallbGVR(o.GetKind())).Namespace(MetalLBNamespace).Apply(actx, o.GetName(), o,
				metav1.ApplyOptions{FieldManager: metallbFieldManager, Force: true})
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("lab: creating MetalLB %s %s (last error: %v): %w", o.GetKind(), o.GetName(), last, err)
		}
	}
	c.progress(fmt.Sprintf("MetalLB's webhook admitted the pool and L2Advertisement (%v after the manifest)", time.Since(start).Round(100*time.Millisecond)))
	return nil
}
