package lab_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

// envBGPFailoverRuns sets how many hard kills TestLabBGPMooring measures
// (default 1: the CI budget); docs/benchmarks.md's series sets it.
const envBGPFailoverRuns = "MOORING_BGP_FAILOVER_RUNS"

// TestLabBGPMooring runs the BGP lab with Mooring's own speaker: every
// agent (--bgp) peers with the lab's FRR router through the BGPPeer the
// lab creates (3 s hold time; no BFD yet, see bgp.go), the demo Service's
// address is one ECMP route over the three nodes in zebra and in the
// router's kernel (IPv4 and IPv6, the IPv6 one with the nodes' global
// next hops), the client behind the router reaches it only through the
// router, and `mooring failover`, unchanged, kills a next hop: the
// router's hold timer removes it from the route, and restoring the node
// brings it back.
func TestLabBGPMooring(t *testing.T) {
	runs := 1
	if v := os.Getenv(envBGPFailoverRuns); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of runs", envBGPFailoverRuns, v)
		}
		runs = n
	}
	hold := 3 * time.Second
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, Mooring: true, LogLevel: slog.LevelWarn,
		BGP: lab.BGPConfig{Enabled: true, HoldTime: hold}})
	router := r.Cluster.Router()
	var nodes4, nodes6 []netip.Addr
	for i := 1; i <= 3; i++ {
		h := r.Cluster.Host(netlab.NodeName(i))
		nodes4, nodes6 = append(nodes4, h.Addr4), append(nodes6, h.Addr6)
	}
	var vip4, vip6 netip.Prefix
	for _, in := range r.Service.Ingress {
		a := netip.MustParseAddr(in)
		if a.Is4() {
			vip4 = netip.PrefixFrom(a, 32)
		} else {
			vip6 = netip.PrefixFrom(a, 128)
		}
	}
	if !vip4.IsValid() || !vip6.IsValid() {
		t.Fatalf("the demo Service has ingress %v, want an IPv4 and an IPv6 address", r.Service.Ingress)
	}
	waitNexthops(t, ctx, router, vip4, nodes4, 30*time.Second)
	waitNexthops(t, ctx, router, vip6, nodes6, 30*time.Second)
	checkKernelECMP(t, r.Cluster.Host(lab.RouterHost), vip4, nodes4)
	checkRoutedClient(t, r.Cluster.Host(netlab.ClientName), vip4.Addr())
	checkAnswers(t, ctx, r.Cluster.Host(netlab.ClientName), vip4.Addr())

	// The router's hold timer runs from the last keepalive it got, up to a
	// keepalive interval (hold/3) before the kill; the upper bound leaves a
	// loaded machine room. The figures are in docs/benchmarks.md.
	checkFailoverCLI(t, r, runs, hold*2/3-500*time.Millisecond, hold+5*time.Second)
	waitNexthops(t, ctx, router, vip4, nodes4, 2*time.Minute) // restored by the failover run
}

// checkAnswers checks one HTTP request from the client to addr succeeds.
func checkAnswers(t *testing.T, ctx context.Context, client *netlab.Host, addr netip.Addr) {
	t.Helper()
	url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(addr, lab.DemoPort))
	c := labtest.HTTPClient(client, 2*time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the client cannot reach %s through the router: %v", url, err)
		}
	}
}
