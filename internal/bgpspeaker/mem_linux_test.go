package bgpspeaker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"

	mbgp "github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// TestMemTenThousand measures the heap the speaker holds for 10,000
// dual-stack Services' routes (BGPSPEAKER_SERVICES to change) on one
// established session; a second GoBGP in this process receives them and
// its RIB-in is counted too. Off unless BGPSPEAKER_BENCH=1;
// BGPSPEAKER_HEAP=file writes a heap profile, which tells the two apart.
func TestMemTenThousand(t *testing.T) {
	benchOnly(t)
	rcv := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP, api.Family_AFI_IP6)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	base := heapInUse()
	sp := bgpspeaker.New(bgpspeaker.NewGoBGP(log, nil), log, -1)
	ctx := context.Background()
	defer sp.Shutdown(ctx, false)
	attrs := &mbgp.Attrs{Communities: []uint32{1}}
	var routes []mbgp.Route
	for i := range memRoutes() {
		routes = append(routes, mbgp.Route{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)}), 32), Attrs: attrs},
			mbgp.Route{Prefix: netip.MustParsePrefix(fmt.Sprintf("fd00:100::%x/128", i+1)), Attrs: attrs})
	}
	ses := rcv.session("r", 64500, routes...)
	d := bgpspeaker.Desired{Node: mbgp.NodeResult{Node: "n", RouterID: netip.MustParseAddr("127.0.0.2"), ASN: 64512, Sessions: []mbgp.Session{ses}}}
	if err := sp.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every route at the receiver", func() (bool, string) {
		st, _ := sp.Status(ctx)
		return len(st) == 1 && st[0].PrefixesSent == int64(2*memRoutes()), fmt.Sprintf("%+v", st)
	})
	time.Sleep(time.Second)
	routes, d = nil, bgpspeaker.Desired{}
	ses.Routes = nil
	used := heapInUse() - base
	t.Logf("heap for %d routes on one session: %.1f MiB (the speaker's and the in-process receiver's: the heap profile's stacks under bgpspeaker.(*GoBGP).Start are the speaker's GoBGP)", 2*memRoutes(), float64(used)/(1<<20))
	if f := os.Getenv("BGPSPEAKER_HEAP"); f != "" {
		out, _ := os.Create(f)
		_ = pprof.WriteHeapProfile(out)
		out.Close()
	}
}

// memRoutes is how many dual-stack Services TestMemTenThousand routes:
// 10,000, or BGPSPEAKER_SERVICES.
func memRoutes() int {
	if n, err := strconv.Atoi(os.Getenv("BGPSPEAKER_SERVICES")); err == nil && n >= 0 {
		return n
	}
	return 10000
}
