package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestPoolAdmission proves on a real kube-apiserver that the CRD's CEL rules
// reject bad pools at admission with a message that names the fix, and admit
// good ones.
func TestPoolAdmission(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cases := []struct {
		name    string
		blocks  []mooringv1.IPBlock
		wantErr string // substring of the admission error; "" means admitted
	}{
		{"cidr v4", []mooringv1.IPBlock{{CIDR: "192.0.2.0/24"}}, ""},
		{"cidr v6 /64", []mooringv1.IPBlock{{CIDR: "2001:db8:1::/64"}}, ""},
		{"range v4", []mooringv1.IPBlock{{Start: "192.0.2.10", Stop: "192.0.2.20"}}, ""},
		{"range v4 one address", []mooringv1.IPBlock{{Start: "192.0.2.10", Stop: "192.0.2.10"}}, ""},
		{"range v6", []mooringv1.IPBlock{{Start: "2001:db8::10", Stop: "2001:db8::20"}}, ""},
		{"bad cidr text", []mooringv1.IPBlock{{CIDR: "banana"}}, "cidr must be a network in CIDR notation"},
		{"bad cidr prefix", []mooringv1.IPBlock{{CIDR: "192.0.2.0/33"}}, "cidr must be a network in CIDR notation"},
		{"cidr host bits", []mooringv1.IPBlock{{CIDR: "192.0.2.7/24"}}, "write the network address"},
		{"start after stop", []mooringv1.IPBlock{{Start: "192.0.2.20", Stop: "192.0.2.10"}}, "start must not be greater than stop"},
		{"start after stop in third octet", []mooringv1.IPBlock{{Start: "192.0.3.1", Stop: "192.0.2.255"}}, "start must not be greater than stop"},
		{"mixed families", []mooringv1.IPBlock{{Start: "192.0.2.1", Stop: "2001:db8::1"}}, "cannot mix IPv4 and IPv6"},
		{"bad start", []mooringv1.IPBlock{{Start: "192.0.2", Stop: "192.0.2.9"}}, "start must be a single IPv4 or IPv6 address"},
		{"empty block", []mooringv1.IPBlock{{}}, "set exactly one form"},
		{"start without stop", []mooringv1.IPBlock{{Start: "192.0.2.1"}}, "set exactly one form"},
		{"cidr and range", []mooringv1.IPBlock{{CIDR: "192.0.2.0/24", Start: "192.0.2.1", Stop: "192.0.2.2"}}, "set exactly one form"},
		{"no blocks", []mooringv1.IPBlock{}, "spec.blocks"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := &mooringv1.LoadBalancerIPPool{
				ObjectMeta: metav1.ObjectMeta{Name: "pool-" + string(rune('a'+i))},
				Spec:       mooringv1.LoadBalancerIPPoolSpec{Blocks: tc.blocks},
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
			t.Logf("rejected as expected: %v", err)
		})
	}
}
