package agent

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// The local snapshot: an agent restarted while the API server is
// unreachable would otherwise announce nothing (its informer caches never
// sync). So a live agent keeps, under --state-dir, the inputs its decision
// read (the slimmed Nodes, policies, Services and EndpointSlices of its
// caches) and what it answered for then. At start, when the caches have
// not synced within --snapshot-wait, the agent decides from the snapshot
// instead of the caches (snapshotReader), and switches to the caches once
// they sync.
//
// The snapshot replaces only the API objects: gossip stays live, so the
// ranking still uses the live members and what they publish. A returning
// agent whose peers are alive holds down and takes back its addresses the
// way it would with the API server up (or never, if peers rank it out);
// an agent that finds no peer (a whole-cluster restart) serves what the
// snapshot says after the settle timeout.
//
// Written atomically (a temporary file renamed over the old one), only when
// its content changed, and at most every snapshotGap: a write is triggered
// by a published decision, not by every informer event. Cost at 10,000
// Services (measured on the loaded 2-core test machine): ~0.1 s to encode
// and hash, ~0.2 s to write a 120 KB file, ~0.5 s to load it at start
// (measured before the compact store, which rebuilds an object per Service
// for each read: that cost, up to once per snapshotGap, is not measured).

// snapshotName is the file under --state-dir.
const snapshotName = "l2-snapshot.json.gz"

// snapshotVersion is bumped when the format changes incompatibly; an
// agent refuses (and says so) a snapshot of another version.
const snapshotVersion = 1

// snapshotGap bounds how often the snapshot is rewritten (and how stale it
// may be when the agent stops).
const snapshotGap = 10 * time.Second

// snapshotFile is the on-disk format (gzipped JSON).
type snapshotFile struct {
	Version int       `json:"version"`
	Node    string    `json:"node"`
	Written time.Time `json:"written"`
	// Owned is what this node answered for when it was written, by
	// interface name: for operators and logs; the decision recomputes it.
	Owned    []snapshotEntry                  `json:"owned"`
	Nodes    []corev1.Node                    `json:"nodes"`
	Policies []mooringv1.L2AnnouncementPolicy `json:"policies"`
	Services []corev1.Service                 `json:"services"`
	Slices   []discoveryv1.EndpointSlice      `json:"endpointSlices"`
}

type snapshotEntry struct {
	Addr      string `json:"addr"`
	Interface string `json:"interface"`
}

// snapshotPath is the snapshot file of a state dir.
func snapshotPath(dir string) string { return filepath.Join(dir, snapshotName) }

// readSnapshot builds a snapshot of what the decision reads from r, with
// the local entries of res.
func readSnapshot(ctx context.Context, r client.Reader, node string, res announce.Result) (*snapshotFile, error) {
	s := &snapshotFile{Version: snapshotVersion, Node: node}
	var (
		nodes corev1.NodeList
		pols  mooringv1.L2AnnouncementPolicyList
		svcs  corev1.ServiceList
		es    discoveryv1.EndpointSliceList
	)
	// Read-only: encoded, never changed (UnsafeDisableDeepCopy spares a
	// copy where the reader would make one; the compact store builds each
	// object afresh anyway).
	for _, l := range []client.ObjectList{&nodes, &pols, &svcs, &es} {
		if err := r.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing from the cache for the snapshot: %w", err)
		}
	}
	s.Nodes, s.Policies, s.Services, s.Slices = nodes.Items, pols.Items, svcs.Items, es.Items
	for _, e := range res.Local {
		s.Owned = append(s.Owned, snapshotEntry{Addr: e.Addr.String(), Interface: e.IfName})
	}
	return s, nil
}

// contentHash identifies a snapshot's content, its write time aside.
// It streams the encoding into the hash: no copy of the whole encoding.
func (s *snapshotFile) contentHash() ([32]byte, error) {
	c := *s
	c.Written = time.Time{}
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(&c); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

// writeSnapshot writes s to dir atomically: a crash leaves the old file or
// the new one, never a torn one.
func writeSnapshot(dir string, s *snapshotFile) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating --state-dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, snapshotName+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing the snapshot: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	zw := gzip.NewWriter(tmp)
	err = json.NewEncoder(zw).Encode(s)
	err = errors.Join(err, zw.Close(), tmp.Sync(), tmp.Close())
	if err != nil {
		return fmt.Errorf("writing the snapshot %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), snapshotPath(dir)); err != nil {
		return fmt.Errorf("replacing the snapshot: %w", err)
	}
	if d, err := os.Open(dir); err == nil { // make the rename durable
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// loadSnapshot reads the snapshot of node from dir; every error says what
// is wrong with the file.
func loadSnapshot(dir, node string) (*snapshotFile, error) {
	path := snapshotPath(dir)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no snapshot to serve from: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s is corrupt (not gzip): %w", path, err)
	}
	var s snapshotFile
	dec := json.NewDecoder(zr)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("snapshot %s is corrupt: %w", path, err)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, fmt.Errorf("snapshot %s is corrupt (truncated): %w", path, err)
	}
	switch {
	case s.Version != snapshotVersion:
		return nil, fmt.Errorf("snapshot %s has format version %d, this agent reads %d", path, s.Version, snapshotVersion)
	case s.Node != node:
		return nil, fmt.Errorf("snapshot %s was written by node %q, not %q", path, s.Node, node)
	}
	return &s, nil
}

// snapshotLoop writes the snapshot after published decisions while the
// agent serves from live caches, at most every snapshotGap and only when
// the content changed. Errors are logged: a failed write costs only the
// restart-without-API-server case.
func (a *Agent) snapshotLoop(ctx context.Context) error {
	if a.cfg.StateDir == "" {
		return nil
	}
	var last [32]byte
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.toSnapshot.ready():
		}
		if a.ready.source.Load() != sourceLive {
			continue // never overwrite the snapshot with itself
		}
		res, _ := a.toSnapshot.get()
		if _, err := a.saveSnapshot(ctx, res, &last); err != nil {
			a.log.Warn("writing the local snapshot; a restart while the API server is unreachable would serve an older one", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.deps.Clock.After(snapshotGap):
		}
	}
}

// saveSnapshot writes the snapshot if its content differs from the one
// whose hash is *last, and reports whether it wrote.
func (a *Agent) saveSnapshot(ctx context.Context, res announce.Result, last *[32]byte) (bool, error) {
	s, err := readSnapshot(ctx, a.deps.Reader, a.cfg.NodeName, res)
	if err != nil {
		return false, err
	}
	h, err := s.contentHash()
	if err != nil || h == *last {
		return false, err
	}
	s.Written = a.deps.Clock.Now().UTC()
	if err := writeSnapshot(a.cfg.StateDir, s); err != nil {
		return false, err
	}
	*last = h
	a.snapMet.writes.Inc()
	a.log.Debug("snapshot written", "path", snapshotPath(a.cfg.StateDir), "owned", len(s.Owned), "services", len(s.Services))
	return true, nil
}

// syncer is what startFrom needs of the informer cache.
type syncer interface {
	WaitForCacheSync(ctx context.Context) bool
}

// startFrom runs the agent (Run) once its caches have synced, or, when they
// have not within SnapshotWait and a snapshot is usable, at once from the
// snapshot, switching src to the caches when they sync.
func (a *Agent) startFrom(ctx context.Context, live syncer, src *switchReader) error {
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
	s, err := loadSnapshot(a.cfg.StateDir, a.cfg.NodeName)
	if err != nil {
		msg := fmt.Sprintf("the API server has not answered for %s and the local snapshot cannot be used (%v): announcing nothing until the API server answers", a.cfg.SnapshotWait, err)
		a.ready.waiting.Store(&msg)
		a.log.Error("the API server has not answered and the local snapshot cannot be used: announcing nothing until the API server answers",
			"waited", a.cfg.SnapshotWait, "err", err)
		if !live.WaitForCacheSync(ctx) {
			return nil
		}
		a.ready.waiting.Store(nil)
		a.log.Info("caches synced", "node", a.cfg.NodeName)
		return a.Run(ctx)
	}
	a.log.Warn("the API server has not answered: serving from the local snapshot until it does",
		"waited", a.cfg.SnapshotWait, "path", snapshotPath(a.cfg.StateDir), "written", s.Written, "owned then", len(s.Owned),
		"services", len(s.Services), "nodes", len(s.Nodes))
	a.ready.snapshotAt.Store(&s.Written)
	a.ready.source.Store(sourceSnapshot)
	a.snapMet.serving.Set(1)
	src.set(newSnapshotReader(s))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !live.WaitForCacheSync(runCtx) {
			return
		}
		src.set(nil)
		a.ready.source.Store(sourceLive)
		a.snapMet.serving.Set(0)
		a.log.Info("caches synced: serving from the API server again", "node", a.cfg.NodeName)
		a.dirty.mark(func(c *changed) { c.all, c.nodes, c.policies, c.links = true, true, true, true })
	}()
	err = a.Run(ctx)
	stop()
	<-done
	return err
}

type snapshotMetrics struct {
	writes  prometheus.Counter
	serving prometheus.Gauge
}

func newSnapshotMetrics(reg prometheus.Registerer) snapshotMetrics {
	m := snapshotMetrics{
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_snapshot_writes_total",
			Help: "Writes of the local snapshot under --state-dir (only when its content changed).",
		}),
		serving: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_serving_from_snapshot",
			Help: "1 while this agent decides from its local snapshot because the API server has not answered since it started.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.serving)
	}
	return m
}
