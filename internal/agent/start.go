package agent

import (
	"context"
	"fmt"

	"github.com/mooringlb/mooring/internal/agent/health"
	"github.com/mooringlb/mooring/internal/agent/snapshot"
)

// syncer is what startFrom needs of the informer cache.
type syncer interface {
	WaitForCacheSync(ctx context.Context) bool
}

// startFrom runs the agent (Run) once its caches have synced, or, when they
// have not within SnapshotWait and a snapshot is usable, at once from the
// snapshot, switching src to the caches when they sync.
func (a *Agent) startFrom(ctx context.Context, live syncer, src *snapshot.SwitchReader) error {
	wait := ctx
	if a.cfg.StateDir != "" {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, a.cfg.SnapshotWait)
		defer cancel()
	}
	if live.WaitForCacheSync(wait) {
		a.log.Info("caches synced", "node", a.cfg.NodeName)
		return a.Run(ctx)
	}
	if ctx.Err() != nil {
		return nil
	}
	s, err := snapshot.Load(a.cfg.StateDir, a.cfg.NodeName)
	if err != nil {
		return a.startWithoutSnapshot(ctx, live, err)
	}
	return a.startFromSnapshot(ctx, live, src, s)
}

// startWithoutSnapshot waits for the caches, announcing nothing, when the
// snapshot cannot be used (why).
func (a *Agent) startWithoutSnapshot(ctx context.Context, live syncer, why error) error {
	msg := fmt.Sprintf("the API server has not answered for %s and the local snapshot cannot be used (%v): announcing nothing until the API server answers", a.cfg.SnapshotWait, why)
	a.ready.Waiting.Store(&msg)
	a.log.Error("the API server has not answered and the local snapshot cannot be used: announcing nothing until the API server answers",
		"waited", a.cfg.SnapshotWait, "err", why)
	if !live.WaitForCacheSync(ctx) {
		return nil
	}
	a.ready.Waiting.Store(nil)
	a.log.Info("caches synced", "node", a.cfg.NodeName)
	return a.Run(ctx)
}

// startFromSnapshot runs the agent from s at once and switches src to the
// caches when they sync.
func (a *Agent) startFromSnapshot(ctx context.Context, live syncer, src *snapshot.SwitchReader, s *snapshot.File) error {
	a.log.Warn("the API server has not answered: serving from the local snapshot until it does",
		"waited", a.cfg.SnapshotWait, "path", snapshot.Path(a.cfg.StateDir), "written", s.Written, "owned then", len(s.Owned),
		"services", len(s.Services), "nodes", len(s.Nodes))
	a.ready.SnapshotAt.Store(&s.Written)
	a.ready.Source.Store(health.SourceSnapshot)
	a.snapMet.Serving.Set(1)
	src.Set(snapshot.NewReader(s))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !live.WaitForCacheSync(runCtx) {
			return
		}
		src.Set(nil)
		a.ready.Source.Store(health.SourceLive)
		a.snapMet.Serving.Set(0)
		a.log.Info("caches synced: serving from the API server again", "node", a.cfg.NodeName)
		a.dirty.mark(func(c *changed) { c.all, c.nodes, c.policies, c.links = true, true, true, true })
	}()
	err := a.Run(ctx)
	stop()
	<-done
	return err
}
