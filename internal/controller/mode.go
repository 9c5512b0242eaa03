package controller

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Annotations the leading replica sets on its leader-election Lease, so that
// tools (`mooring migrate metallb run`) can tell how the controller that
// writes runs without scraping its metrics: the Lease is the one object
// that belongs to the leader, and its holderIdentity and renewTime say
// which replica wrote them and that it is alive.
const (
	AnnotationAdoptOnly    = "mooring.dev/adopt-only"
	AnnotationDefaultClass = "mooring.dev/default-class"
)

// modePublisher writes the annotations once this replica leads (a
// leader-only runnable) and again if someone removes them.
type modePublisher struct {
	c         client.Client
	r         client.Reader // uncached: the role may get, not list, Leases
	key       types.NamespacedName
	adoptOnly bool
	defClass  bool
	log       *slog.Logger
}

func (p *modePublisher) Start(ctx context.Context) error {
	want := map[string]string{
		AnnotationAdoptOnly:    strconv.FormatBool(p.adoptOnly),
		AnnotationDefaultClass: strconv.FormatBool(p.defClass),
	}
	for {
		if err := p.publish(ctx, want); err != nil && ctx.Err() == nil {
			p.log.Warn("publishing the controller's mode on its Lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
		}
	}
}

func (p *modePublisher) publish(ctx context.Context, want map[string]string) error {
	var l coordinationv1.Lease
	if err := p.r.Get(ctx, p.key, &l); err != nil {
		return err
	}
	same := true
	for k, v := range want {
		if l.Annotations[k] != v {
			same = false
		}
	}
	if same {
		return nil
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	for k, v := range want {
		l.Annotations[k] = v
	}
	return p.c.Update(ctx, &l)
}
