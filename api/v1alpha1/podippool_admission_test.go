package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestPodIPPoolAdmission proves on a real kube-apiserver that the
// PodIPPool's CEL rules reject bad CIDRs and mask sizes at admission with a
// message that names the fix, and admit good pools.
func TestPodIPPoolAdmission(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	fam := func(mask int32, cidrs ...string) *mooringv1.PodIPPoolFamily {
		return &mooringv1.PodIPPoolFamily{CIDRs: cidrs, MaskSize: mask}
	}
	cases := []struct {
		name    string
		v4, v6  *mooringv1.PodIPPoolFamily
		wantErr string
	}{
		{"v4", fam(26, "10.250.0.0/16"), nil, ""},
		{"dual", fam(24, "10.244.0.0/16", "10.245.0.0/16"), fam(120, "fd00:10:244::/56"), ""},
		{"v6 only", nil, fam(112, "fd00::/64"), ""},
		{"mask equals prefix", fam(24, "10.0.0.0/24"), nil, ""},
		{"neither family", nil, nil, "a pool needs ipv4, ipv6 or both"},
		{"bad cidr", fam(24, "banana"), nil, "each cidr must be a network in CIDR notation"},
		{"host bits", fam(26, "10.250.3.0/16"), nil, "write the network address"},
		{"mask below prefix", fam(16, "10.250.0.0/24"), nil, "maskSize must be at least the prefix length"},
		{"v4 mask too long", fam(33, "10.250.0.0/16"), nil, "ipv4.maskSize must be at most 32"},
		{"v6 in ipv4", fam(120, "fd00::/64"), nil, "move IPv6 ones to ipv6.cidrs"},
		{"v4 in ipv6", nil, fam(26, "10.0.0.0/16"), "move IPv4 ones to ipv4.cidrs"},
		{"no cidrs", fam(24), nil, "spec.ipv4.cidrs"},
		{"zero mask", fam(0, "10.0.0.0/8"), nil, "spec.ipv4.maskSize"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := &mooringv1.PodIPPool{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("podpool-%d", i)},
				Spec:       mooringv1.PodIPPoolSpec{IPv4: tc.v4, IPv6: tc.v6},
			}
			err := env.Client.Create(ctx, pool)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid pool rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid pool admitted; want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}

	// The per-node record takes requests and blocks.
	n := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec: mooringv1.PodIPAMNodeSpec{Requests: []mooringv1.PodIPAMRequest{{Pool: "default", IPv4Addresses: 8}}}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatalf("create PodIPAMNode: %v", err)
	}
	n.Status.Blocks = []mooringv1.PodIPAMBlock{{Pool: "default", CIDR: "10.244.0.0/26"}}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatalf("update PodIPAMNode status: %v", err)
	}
}
