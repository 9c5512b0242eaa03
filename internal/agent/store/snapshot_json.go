package store

import (
	"bufio"
	"cmp"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The store writes its Services and slices into the local snapshot
// (internal/agent/snapshot) straight from the compact form, as JSON of the
// same shape as the API objects, sorted, without resource versions or
// UIDs: equal inputs give equal bytes, and no object is built per Service.

// Generation moves after every change the decision reads.
func (s *Store) Generation() uint64 { return s.gen.Load() }

// WriteSnapshotJSON writes the Services and slices as the members
// "services" and "endpointSlices", in the JSON shape of the API objects
// the Reader would return (without resource versions and UIDs),
// sorted by key.
func (s *Store) WriteSnapshotJSON(w *bufio.Writer) {
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
