package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Mode is how the leading controller runs, as it publishes it on its
// leader-election Lease (AnnotationAdoptOnly, AnnotationDefaultClass).
// Tools read it instead of scraping the controller's metrics.
type Mode struct {
	// Found: the Lease exists.
	Found bool
	// Holder is the leading replica's identity, "" when none leads.
	Holder string
	// RenewedAgo is the time since the holder last renewed the Lease;
	// Alive: a holder that renewed within twice the lease duration (or
	// whose Lease says neither).
	RenewedAgo time.Duration
	Alive      bool
	// Published: the holder wrote its mode (an older controller does not).
	Published               bool
	AdoptOnly, DefaultClass bool
}

// ReadMode reads the Lease ns/name. A missing Lease is no error: Found is
// false.
func ReadMode(ctx context.Context, leases coordinationv1client.LeasesGetter, ns, name string, now time.Time) (Mode, error) {
	l, err := leases.Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Mode{}, nil
	}
	if err != nil {
		return Mode{}, fmt.Errorf("reading the Mooring controller's Lease %s/%s: %w", ns, name, err)
	}
	m := Mode{Found: true}
	if l.Spec.HolderIdentity != nil {
		m.Holder = *l.Spec.HolderIdentity
	}
	m.Alive = m.Holder != ""
	if l.Spec.RenewTime != nil {
		m.RenewedAgo = now.Sub(l.Spec.RenewTime.Time)
		if l.Spec.LeaseDurationSeconds != nil {
			m.Alive = m.Alive && m.RenewedAgo <= 2*time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
		}
	}
	ao, okAO := l.Annotations[AnnotationAdoptOnly]
	dc, okDC := l.Annotations[AnnotationDefaultClass]
	m.Published = okAO
	m.AdoptOnly, _ = strconv.ParseBool(ao)
	m.DefaultClass = true // the controller's default
	if okDC {
		m.DefaultClass, _ = strconv.ParseBool(dc)
	}
	return m, nil
}
