package controller

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
)

// TestLeaseCarriesTheMode: the replica that takes the Lease writes its mode
// annotations in the same request as its holderIdentity (no version of the
// Lease names a holder without them), and annotations someone removed come
// back with a renewal, without the controller reading the Lease on its own.
func TestLeaseCarriesTheMode(t *testing.T) {
	env := startEnv(t)
	leases := env.Clientset.CoordinationV1().Leases(DefaultLeaseNamespace)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + DefaultLeaseName})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	startController(t, env.Config, func(cfg *Config) {
		cfg.AdoptOnly = true
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	})
	want := map[string]string{AnnotationAdoptOnly: "true", AnnotationDefaultClass: "true"}
	carries := func(l *coordinationv1.Lease) bool {
		for k, v := range want {
			if l.Annotations[k] != v {
				return false
			}
		}
		return true
	}
	// next returns the next Lease version the watch delivers.
	next := func() *coordinationv1.Lease {
		t.Helper()
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("the Lease watch ended")
				}
				if l, ok := ev.Object.(*coordinationv1.Lease); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					return l
				}
			case <-ctx.Done():
				t.Fatal("no Lease version within a minute")
			}
		}
	}
	var l *coordinationv1.Lease
	for l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		l = next()
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && !carries(l) {
			t.Fatalf("the Lease names holder %s without the mode: %v", *l.Spec.HolderIdentity, l.Annotations)
		}
	}

	// An operator strips the annotations (retrying when a renewal came
	// first): the next renewals put them back.
	var stripped *coordinationv1.Lease
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := leases.Get(ctx, DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for k := range want {
			delete(cur.Annotations, k)
		}
		stripped, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for {
		l = next()
		if l.ResourceVersion != stripped.ResourceVersion && carries(l) {
			break
		}
	}
	t.Logf("the mode was back on the Lease %v after it was removed", time.Since(at).Round(time.Millisecond))
}
