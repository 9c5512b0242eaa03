package controller

import (
	"context"
	"errors"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// startup runs once per leadership, before anything is allocated, in the
// order Cilium's LB-IPAM uses: pools synced, conflicts resolved (SetPools),
// every existing assignment imported (whoever wrote it, MetalLB included),
// and only then the gate opens for the reconcilers.
type startup struct {
	cache   cache.Cache
	c       client.Reader
	st      *state
	log     *slog.Logger
	classes classes
}

func (s *startup) Start(ctx context.Context) error {
	if !s.cache.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("controller: caches did not sync; check that the ServiceAccount may list and watch services, namespaces, nodes, loadbalancerippools and l2announcementpolicies")
	}
	pools, err := listPools(ctx, s.c)
	if err != nil {
		return err
	}
	var svcs corev1.ServiceList
	if err := s.c.List(ctx, &svcs); err != nil {
		return err
	}
	var nss corev1.NamespaceList
	if err := s.c.List(ctx, &nss); err != nil {
		return err
	}
	nsLabels := make(map[string]map[string]string, len(nss.Items))
	for i := range nss.Items {
		nsLabels[nss.Items[i].Name] = nss.Items[i].Labels
	}
	s.st.setPools(pools)
	imported, addrs := s.importAll(svcs.Items, nsLabels)
	s.log.Info("lbipam start-up import done; serving requests",
		"pools", len(pools), "services", imported, "addresses", addrs)
	if n := foreignWritten(svcs.Items, s.classes); n > 0 {
		s.log.Warn("Services without a loadBalancerClass hold addresses another controller wrote; Mooring now serves them. If that controller (MetalLB, Cilium) still runs, restart with --adopt-only until it is gone",
			"services", n)
	}
	s.st.open()
	return nil
}

// foreignWritten counts our class-less Services that hold an address but
// carry no condition of Mooring's: another controller wrote their status.
func foreignWritten(svcs []corev1.Service, cl classes) int {
	n := 0
	for i := range svcs {
		svc := &svcs[i]
		if svc.Spec.LoadBalancerClass == nil && classify(svc, cl) == ours && len(heldAddrs(svc)) > 0 &&
			meta.FindStatusCondition(svc.Status.Conditions, mooringv1.ConditionAddressAssigned) == nil {
			n++
		}
	}
	return n
}

// importAll adopts every held address as it is: ours with their full
// request (so sharing checks know their ports), others' as reservations.
// Ours that hold nothing but request an address are imported too, so no
// Service looked at before them is given that address.
func (s *startup) importAll(svcs []corev1.Service, nsLabels map[string]map[string]string) (services, addrs int) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	// Every Service is reconciled once anyway when the informers replay
	// their contents; no need to re-enqueue them for the initial pools.
	st.poolsChanged = false
	for i := range svcs {
		svc := &svcs[i]
		held := heldAddrs(svc)
		var in lbipam.Service
		switch classify(svc, s.classes) {
		case notLoadBalancer:
			continue
		case foreignClass:
			in = lbipam.Service{Key: serviceKey(svc), Held: held}
		case ours, adopted:
			in, _ = toService(svc, nsLabels[svc.Namespace])
		}
		if len(in.Held) == 0 && len(in.Requested) == 0 {
			continue
		}
		res := st.alloc.Import(in)
		st.held[in.Key] = len(res.Addrs)
		services++
		addrs += len(res.Addrs)
	}
	return services, addrs
}
