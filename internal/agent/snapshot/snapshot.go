package snapshot

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/mailbox"
	"github.com/mooringlb/mooring/internal/announce"
)

// The local snapshot: an agent restarted while the API server is
// unreachable would otherwise announce nothing (its informer caches never
// sync). So a live agent keeps, under --state-dir, the inputs its decision
// read (the slimmed Nodes, policies, Services and EndpointSlices of its
// caches) and what it answered for then. At start, when the caches have
// not synced within --snapshot-wait, the agent decides from the snapshot
// instead of the caches (Reader), and switches to the caches once
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
// Services (BenchmarkSnapshot10k, docs/benchmarks.md, issue 13 fourth
// pass): a pass after which nothing the decision reads changed ~0.5 ms
// (only the Nodes, policies and owned entries are encoded:
// encode.go); a changed Service ~70 ms with the write and fsync,
// 3 MB allocated; ~0.5 s to load it at start.

// snapshotName is the file under --state-dir.
const snapshotName = "l2-snapshot.json.gz"

// Version is bumped when the format changes incompatibly; an
// agent refuses (and says so) a snapshot of another version.
const Version = 1

// snapshotGap bounds how often the snapshot is rewritten (and how stale it
// may be when the agent stops).
const snapshotGap = 10 * time.Second

// File is the on-disk format (gzipped JSON).
type File struct {
	Version int       `json:"version"`
	Node    string    `json:"node"`
	Written time.Time `json:"written"`
	// Owned is what this node answered for when it was written, by
	// interface name: for operators and logs; the decision recomputes it.
	Owned    []Entry                          `json:"owned"`
	Nodes    []corev1.Node                    `json:"nodes"`
	Policies []mooringv1.L2AnnouncementPolicy `json:"policies"`
	Services []corev1.Service                 `json:"services"`
	Slices   []discoveryv1.EndpointSlice      `json:"endpointSlices"`
}

type Entry struct {
	Addr      string `json:"addr"`
	Interface string `json:"interface"`
}

// Path is the snapshot file of a state dir.
func Path(dir string) string { return filepath.Join(dir, snapshotName) }

// Write writes s to dir atomically (tests and tools: the agent
// streams its snapshot, Keeper.Save).
func Write(dir string, s *File) error {
	tmp, err := createSnapshot(dir)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(tmp).Encode(s); err != nil {
		tmp.abort()
		return fmt.Errorf("encoding the snapshot: %w", err)
	}
	return tmp.commit(dir)
}

// snapshotTmp is a snapshot being written to a temporary file, renamed
// over the old one by commit: a crash leaves the old file or the new one,
// never a torn one.
type snapshotTmp struct {
	f  *os.File
	zw *gzip.Writer
}

func createSnapshot(dir string) (*snapshotTmp, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --state-dir: %w", err)
	}
	f, err := os.CreateTemp(dir, snapshotName+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("writing the snapshot: %w", err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed) // a valid level: no error
	return &snapshotTmp{f: f, zw: zw}, nil
}

func (t *snapshotTmp) Write(p []byte) (int, error) { return t.zw.Write(p) }

// abort drops the temporary file.
func (t *snapshotTmp) abort() {
	t.f.Close()
	os.Remove(t.f.Name())
}

// commit makes the temporary file the snapshot of dir.
func (t *snapshotTmp) commit(dir string) error {
	defer os.Remove(t.f.Name()) // a no-op once renamed
	if err := errors.Join(t.zw.Close(), t.f.Sync(), t.f.Close()); err != nil {
		return fmt.Errorf("writing the snapshot %s: %w", t.f.Name(), err)
	}
	if err := os.Rename(t.f.Name(), Path(dir)); err != nil {
		return fmt.Errorf("replacing the snapshot: %w", err)
	}
	if d, err := os.Open(dir); err == nil { // make the rename durable
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Load reads the snapshot of node from dir; every error says what
// is wrong with the file.
func Load(dir, node string) (*File, error) {
	path := Path(dir)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no snapshot to serve from: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s is corrupt (not gzip): %w", path, err)
	}
	var s File
	dec := json.NewDecoder(zr)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("snapshot %s is corrupt: %w", path, err)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, fmt.Errorf("snapshot %s is corrupt (truncated): %w", path, err)
	}
	switch {
	case s.Version != Version:
		return nil, fmt.Errorf("snapshot %s has format version %d, this agent reads %d", path, s.Version, Version)
	case s.Node != node:
		return nil, fmt.Errorf("snapshot %s was written by node %q, not %q", path, s.Node, node)
	}
	return &s, nil
}

// Keeper writes the snapshot of a live agent.
type Keeper struct {
	Dir, Node string
	Reader    client.Reader // what the decision reads
	Clock     clock.Clock
	Log       *slog.Logger
	Metrics   Metrics
}

// Run writes the snapshot after published decisions (in) while live
// reports that the agent serves from live caches, at most every
// snapshotGap and only when the content changed. Errors are logged: a
// failed write costs only the restart-without-API-server case.
func (k *Keeper) Run(ctx context.Context, in *mailbox.Box[announce.Result], live func() bool) error {
	if k.Dir == "" {
		return nil
	}
	var last Mark
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-in.Ready():
		}
		if !live() {
			continue // never overwrite the snapshot with itself
		}
		res, _ := in.Get()
		if _, err := k.Save(ctx, res, &last); err != nil {
			k.Log.Warn("writing the local snapshot; a restart while the API server is unreachable would serve an older one", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-k.Clock.After(snapshotGap):
		}
	}
}

// Save writes the snapshot if its content differs from what *last
// records, and reports whether it wrote. The content streams through the
// hash into the compressed temporary file: no copy of the whole encoding
// is held, and an unchanged content is dropped before the rename.
func (k *Keeper) Save(ctx context.Context, res announce.Result, last *Mark) (bool, error) {
	mark, maybe, err := snapshotHead(ctx, k.Reader, k.Node, res, *last)
	if err != nil || !maybe {
		return false, err
	}
	tmp, err := createSnapshot(k.Dir)
	if err != nil {
		return false, err
	}
	written, _ := json.Marshal(k.Clock.Now().UTC())
	fmt.Fprintf(tmp, `{"written":%s,`, written)
	h := sha256.New()
	if err := writeSnapshotBody(ctx, k.Reader, mark, bufio.NewWriterSize(io.MultiWriter(h, tmp), 64<<10)); err != nil {
		tmp.abort()
		return false, fmt.Errorf("writing the snapshot: %w", err)
	}
	mark.hash = [32]byte(h.Sum(nil))
	if last.valid && last.hash == mark.hash {
		tmp.abort()
		*last = mark
		return false, nil
	}
	if err := tmp.commit(k.Dir); err != nil {
		return false, err
	}
	*last = mark
	k.Metrics.Writes.Inc()
	k.Log.Debug("snapshot written", "path", Path(k.Dir), "owned", len(res.Local))
	return true, nil
}

// Metrics are the snapshot's.
type Metrics struct {
	Writes  prometheus.Counter
	Serving prometheus.Gauge
}

// NewMetrics builds them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) Metrics {
	f := promauto.With(reg)
	return Metrics{
		Writes: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_snapshot_writes_total",
			Help: "Writes of the local snapshot under --state-dir (only when its content changed).",
		}),
		Serving: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_serving_from_snapshot",
			Help: "1 while this agent decides from its local snapshot because the API server has not answered since it started.",
		}),
	}
}
