package lbipam

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// labelSel matches when every key/value is present (nil matches all).
type labelSel map[string]string

func (s labelSel) Matches(l map[string]string) bool {
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func cidr(t testing.TB, s string) Block {
	t.Helper()
	b, err := ParseCIDRBlock(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rng(t testing.TB, a, b string) Block {
	t.Helper()
	blk, err := ParseRangeBlock(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return blk
}

// pool builds a Pool created `age` minutes after epoch.
func mkPool(name string, age int, blocks ...Block) Pool {
	for i := range blocks {
		blocks[i].Index = i
	}
	return Pool{Name: name, Created: epoch.Add(time.Duration(age) * time.Minute), Blocks: blocks}
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, ip(s))
	}
	return out
}

func v4svc(ns, name string) Service {
	return Service{Key: ServiceKey{ns, name}, Families: []Family{IPv4}, RequireAllFamilies: true}
}

func tcp(ports ...int32) []Port {
	var out []Port
	for _, p := range ports {
		out = append(out, Port{"TCP", p})
	}
	return out
}

func addrsString(r Result) string {
	var parts []string
	for _, a := range r.Addrs {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, ",")
}

func reasons(ps []Problem) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, string(p.Reason))
	}
	return strings.Join(parts, ",")
}

// checkMessages asserts every problem is a sentence naming the Service.
func checkMessages(t testing.TB, svc Service, r Result) {
	t.Helper()
	for _, p := range append(append([]Problem{}, r.Pending...), r.Warnings...) {
		if !strings.Contains(p.Message, svc.Key.String()) || !strings.Contains(p.Message, ": ") || p.Family == 0 {
			t.Errorf("problem %+v does not name the Service, a fix or a family", p)
		}
	}
}

func ptr[T any](v T) *T { return &v }
