package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
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

// snapshotMark is what the last written snapshot was made of.
type snapshotMark struct {
	valid bool
	gen   uint64 // the compact store's generation, when read through one
	head  []byte // the encoding up to the Services
	hash  [32]byte
}

// snapshotHead encodes what the snapshot holds besides the Services and
// slices, and reports whether the whole content may differ from last's
// (always, when r has no compact store).
func snapshotHead(ctx context.Context, r client.Reader, node string, res announce.Result, last snapshotMark) (snapshotMark, bool, error) {
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
	fmt.Fprintf(head, `"version":%d,"node":`, snapshotVersion)
	if err := encodeMembers(head, node, owned(res), slimForSnapshot(nodes.Items), slimForSnapshot(pols.Items)); err != nil {
		return last, false, err
	}
	mark := snapshotMark{valid: true, head: head.Bytes()}
	if store := compactOf(r); store != nil {
		mark.gen = store.generation() // before reading: a change after it moves it again
		if last.valid && last.gen == mark.gen && bytes.Equal(last.head, mark.head) {
			return last, false, nil
		}
	}
	return mark, true, nil
}

// writeSnapshotBody writes the snapshot's JSON without its write time
// (the members after `{"written":…,`) to w: mark's head, then the
// Services and slices.
func writeSnapshotBody(ctx context.Context, r client.Reader, mark snapshotMark, w *bufio.Writer) error {
	w.Write(mark.head)
	if store := compactOf(r); store != nil {
		store.writeSnapshotJSON(w)
	} else if err := encodeListed(ctx, r, w); err != nil {
		return err
	}
	w.WriteByte('}')
	return w.Flush()
}

func owned(res announce.Result) []snapshotEntry {
	out := make([]snapshotEntry, 0, len(res.Local))
	for _, e := range res.Local {
		out = append(out, snapshotEntry{Addr: e.Addr.String(), Interface: e.IfName})
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

// readSnapshot is the snapshot a live agent reading r would write, decoded
// (tests).
func readSnapshot(ctx context.Context, r client.Reader, node string, res announce.Result) (*snapshotFile, error) {
	mark, _, err := snapshotHead(ctx, r, node, res, snapshotMark{})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	if err := writeSnapshotBody(ctx, r, mark, bufio.NewWriter(&b)); err != nil {
		return nil, err
	}
	var s snapshotFile
	if err := json.Unmarshal(b.Bytes(), &s); err != nil {
		return nil, fmt.Errorf("decoding the snapshot: %w", err)
	}
	return &s, nil
}

// generation moves after every change the decision reads.
func (s *compactStore) generation() uint64 { return s.gen.Load() }

// writeSnapshotJSON writes the Services and slices as the members
// "services" and "endpointSlices", in the JSON shape of the API objects
// the compact reader would return (without resource versions and UIDs),
// sorted by key.
func (s *compactStore) writeSnapshotJSON(w *bufio.Writer) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var b []byte
	w.WriteString(`"services":[`)
	for i, k := range sortedKeys(s.services) {
		if i > 0 {
			w.WriteByte(',')
		}
		b = s.services[k].appendJSON(b[:0], k)
		w.Write(b)
	}
	w.WriteString(`],"endpointSlices":[`)
	for i, k := range sortedKeys(s.slices) {
		if i > 0 {
			w.WriteByte(',')
		}
		b = s.slices[k].appendJSON(b[:0], k)
		w.Write(b)
	}
	w.WriteByte(']')
}

func sortedKeys[V any](m map[types.NamespacedName]V) []types.NamespacedName {
	keys := make([]types.NamespacedName, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return keys
}

// appendJSON appends the Service as compactService.service builds it.
func (c compactService) appendJSON(b []byte, k types.NamespacedName) []byte {
	b = append(b, `{"kind":"Service","apiVersion":"v1","metadata":{"name":`...)
	b = appendJSONString(b, k.Name)
	b = append(b, `,"namespace":`...)
	b = appendJSONString(b, k.Namespace)
	if len(c.labels) > 0 {
		b = append(b, `,"labels":{`...)
		for i, lk := range slices.Sorted(maps.Keys(c.labels)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendJSONString(b, lk), ':')
			b = appendJSONString(b, c.labels[lk])
		}
		b = append(b, '}')
	}
	b = append(b, `},"spec":{`...)
	if len(c.externalIPs) > 0 {
		b = append(b, `"externalIPs":`...)
		b = appendAddrs(b, c.externalIPs, "")
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = appendJSONString(b, string(c.typ))
	b = append(b, `,"externalTrafficPolicy":`...)
	if c.local {
		b = appendJSONString(b, string(corev1.ServiceExternalTrafficPolicyLocal))
	} else {
		b = appendJSONString(b, string(corev1.ServiceExternalTrafficPolicyCluster))
	}
	if c.class != nil {
		b = append(b, `,"loadBalancerClass":`...)
		b = appendJSONString(b, *c.class)
	}
	b = append(b, `},"status":{"loadBalancer":{`...)
	if len(c.ingress) > 0 {
		b = append(b, `"ingress":`...)
		b = appendAddrs(b, c.ingress, "ip")
	}
	return append(b, `}}}`...)
}

// appendAddrs appends addrs as a JSON array of strings, or of objects
// with the address as field when field is set.
func appendAddrs(b []byte, addrs []netip.Addr, field string) []byte {
	b = append(b, '[')
	for i, a := range addrs {
		if i > 0 {
			b = append(b, ',')
		}
		if field != "" {
			b = append(append(append(b, `{"`...), field...), `":`...)
		}
		b = append(b, '"')
		b = a.AppendTo(b)
		b = append(b, '"')
		if field != "" {
			b = append(b, '}')
		}
	}
	return append(b, ']')
}

// appendJSON appends the slice as compactSlice.slice builds it.
func (c compactSlice) appendJSON(b []byte, k types.NamespacedName) []byte {
	b = append(b, `{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"name":`...)
	b = appendJSONString(b, k.Name)
	b = append(b, `,"namespace":`...)
	b = appendJSONString(b, k.Namespace)
	if c.service != "" {
		b = append(b, `,"labels":{`...)
		b = appendJSONString(b, discoveryv1.LabelServiceName)
		b = append(b, ':')
		b = appendJSONString(b, c.service)
		b = append(b, '}')
	}
	b = append(b, `},"addressType":"","endpoints":`...)
	if len(c.ready) == 0 {
		return append(b, `null}`...)
	}
	b = append(b, '[')
	for i, n := range c.ready {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"addresses":null,"conditions":{"ready":true},"nodeName":`...)
		b = appendJSONString(b, n)
		b = append(b, '}')
	}
	return append(b, `]}`...)
}

// appendJSONString appends s as a JSON string, as encoding/json would.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // rare: escapes and non-ASCII
			return append(b, q...)
		}
	}
	return strconv.AppendQuote(b, s) // plain ASCII: the same bytes
}
