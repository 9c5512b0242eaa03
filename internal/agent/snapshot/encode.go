package snapshot

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/store"
	"github.com/mooringlb/mooring/internal/announce"
)

// Encoding the snapshot at 10,000 Services. Listing through the compact
// store rebuilt an object per Service and JSON-encoded all of them to hash
// them, and the hash covered resource versions and the order of a map
// walk, so every pass rewrote the file (BenchmarkSnapshot10k, numbers in
// docs/benchmarks.md). Now:
//   - what is written is sorted and holds no resource versions or UIDs
//     (the decision reads neither), so equal inputs give equal bytes;
//   - the Nodes, policies and owned entries (few) are encoded every pass;
//     the Services and slices only when the compact store's generation
//     moved (it moves only on changes the decision reads), straight from
//     the compact form into JSON of the same shape as the API objects.

// Mark is what the last written snapshot was made of.
type Mark struct {
	valid bool
	gen   uint64 // the compact store's generation, when read through one
	head  []byte // the encoding up to the Services
	hash  [32]byte
}

// snapshotHead encodes what the snapshot holds besides the Services and
// slices, and reports whether the whole content may differ from last's
// (always, when r has no compact store).
func snapshotHead(ctx context.Context, r client.Reader, node string, res announce.Result, last Mark) (Mark, bool, error) {
	var (
		nodes corev1.NodeList
		pols  mooringv1.L2AnnouncementPolicyList
	)
	for _, l := range []client.ObjectList{&nodes, &pols} {
		if err := r.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return last, false, fmt.Errorf("listing from the cache for the snapshot: %w", err)
		}
	}
	head := &bytes.Buffer{}
	fmt.Fprintf(head, `"version":%d,"node":`, Version)
	if err := encodeMembers(head, node, owned(res), slimForSnapshot(nodes.Items), slimForSnapshot(pols.Items)); err != nil {
		return last, false, err
	}
	mark := Mark{valid: true, head: head.Bytes()}
	if cs := store.Of(r); cs != nil {
		mark.gen = cs.Generation() // before reading: a change after it moves it again
		if last.valid && last.gen == mark.gen && bytes.Equal(last.head, mark.head) {
			return last, false, nil
		}
	}
	return mark, true, nil
}

// writeSnapshotBody writes the snapshot's JSON without its write time
// (the members after `{"written":…,`) to w: mark's head, then the
// Services and slices.
func writeSnapshotBody(ctx context.Context, r client.Reader, mark Mark, w *bufio.Writer) error {
	w.Write(mark.head)
	if cs := store.Of(r); cs != nil {
		cs.WriteSnapshotJSON(w)
	} else if err := encodeListed(ctx, r, w); err != nil {
		return err
	}
	w.WriteByte('}')
	return w.Flush()
}

func owned(res announce.Result) []Entry {
	out := make([]Entry, 0, len(res.Local))
	for _, e := range res.Local {
		out = append(out, Entry{Addr: e.Addr.String(), Interface: e.IfName})
	}
	return out
}

// encodeMembers writes node, owned, nodes and policies as JSON members,
// each followed by a comma.
func encodeMembers(w *bytes.Buffer, node string, rest ...any) error {
	enc := json.NewEncoder(w)
	for i, v := range append([]any{node}, rest...) {
		if i > 0 {
			w.WriteString([]string{"", `"owned":`, `"nodes":`, `"policies":`}[i])
		}
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("encoding the snapshot: %w", err)
		}
		w.Truncate(w.Len() - 1) // Encode's newline
		w.WriteByte(',')
	}
	return nil
}

// slimForSnapshot returns copies of items sorted by namespace and name,
// without resource versions, UIDs or managed fields.
func slimForSnapshot[T any, P interface {
	*T
	client.Object
}](items []T) []T {
	out := make([]T, len(items))
	for i := range items {
		o := P(&items[i]).DeepCopyObject().(P)
		o.SetResourceVersion("")
		o.SetUID("")
		o.SetManagedFields(nil)
		out[i] = *o
	}
	slices.SortFunc(out, func(a, b T) int {
		return cmp.Or(cmp.Compare(P(&a).GetNamespace(), P(&b).GetNamespace()), cmp.Compare(P(&a).GetName(), P(&b).GetName()))
	})
	return out
}

// encodeListed writes the Services and slices read through r (a reader
// without a compact store: tests, or the snapshot itself).
func encodeListed(ctx context.Context, r client.Reader, w *bufio.Writer) error {
	var (
		svcs corev1.ServiceList
		es   discoveryv1.EndpointSliceList
	)
	for _, l := range []client.ObjectList{&svcs, &es} {
		if err := r.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing from the cache for the snapshot: %w", err)
		}
	}
	enc := json.NewEncoder(w)
	w.WriteString(`"services":`)
	if err := enc.Encode(slimForSnapshot(svcs.Items)); err != nil {
		return err
	}
	w.WriteString(`,"endpointSlices":`)
	return enc.Encode(slimForSnapshot(es.Items))
}

// Read is the snapshot a live agent reading r would write, decoded
// (tests).
func Read(ctx context.Context, r client.Reader, node string, res announce.Result) (*File, error) {
	mark, _, err := snapshotHead(ctx, r, node, res, Mark{})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	if err := writeSnapshotBody(ctx, r, mark, bufio.NewWriter(&b)); err != nil {
		return nil, err
	}
	var s File
	if err := json.Unmarshal(b.Bytes(), &s); err != nil {
		return nil, fmt.Errorf("decoding the snapshot: %w", err)
	}
	return &s, nil
}
