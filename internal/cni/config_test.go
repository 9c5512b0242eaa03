package cni

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/mooringlb/mooring/internal/ipamd"
)

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		chained  bool
		socket   string
		wantErr  string
	}{
		{"ipam role", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"mooring-ipam"}}`, false, DefaultSocket, ""},
		{"ipam role socket", `{"cniVersion":"1.1.0","name":"n","type":"ptp","ipam":{"type":"mooring-ipam","socket":"/tmp/x.sock","timeout":"2s"}}`, false, "/tmp/x.sock", ""},
		{"chained role", `{"cniVersion":"1.1.0","name":"n","type":"mooring-ipam","socket":"/tmp/y.sock"}`, true, "/tmp/y.sock", ""},
		{"not json", `{"cniVersion":`, false, "", "not valid JSON"},
		{"no ipam", `{"cniVersion":"1.1.0","name":"n","type":"bridge"}`, false, "", `no "ipam" section`},
		{"other ipam", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"host-local"}}`, false, "", `ipam type is "host-local"`},
		{"relative socket", `{"type":"bridge","ipam":{"type":"mooring-ipam","socket":"x.sock"}}`, false, "", "not an absolute path"},
		{"bad timeout", `{"type":"bridge","ipam":{"type":"mooring-ipam","timeout":"soon"}}`, false, "", "positive duration"},
		{"route without dst", `{"type":"bridge","ipam":{"type":"mooring-ipam","routes":[{}]}}`, false, "", "has no dst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.in))
			if tc.wantErr != "" {
				var ce *types.Error
				if err == nil || !errors.As(err, &ce) || !strings.Contains(ce.Msg, tc.wantErr) {
					t.Fatalf("got %v, want a CNI error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c.Chained != tc.chained || c.IPAM.Socket != tc.socket {
				t.Fatalf("got %+v, %v", c, err)
			}
		})
	}
	if ns, pod, uid := podArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=x;K8S_POD_UID=u-1"); ns != "tenant-a" || pod != "web-0" || uid != "u-1" {
		t.Fatalf("podArgs: %q %q %q", ns, pod, uid)
	}
}

func TestResultDualStackRoutes(t *testing.T) {
	c, err := ParseConfig([]byte(`{"cniVersion":"1.1.0","type":"bridge","ipam":{"type":"mooring-ipam"}}`))
	if err != nil {
		t.Fatal(err)
	}
	al := ipamd.Allocation{IPs: []ipamd.IP{
		{Address: netip.MustParsePrefix("10.244.1.5/26"), Gateway: netip.MustParseAddr("10.244.1.1")},
		{Address: netip.MustParsePrefix("fd00:1::5/120"), Gateway: netip.MustParseAddr("fd00:1::1")},
	}}
	r := result(c, al)
	b, _ := json.Marshal(r)
	want := `{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.5/26","gateway":"10.244.1.1"},{"address":"fd00:1::5/120","gateway":"fd00:1::1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"},{"dst":"::/0","gw":"fd00:1::1"}]}`
	if string(b) != want {
		t.Fatalf("result\n got %s\nwant %s", b, want)
	}
	if _, err := current.NewResultFromResult(r); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseConfig: no stdin makes the parser panic, and every rejection is
// a CNI error result.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"mooring-ipam","routes":[{"dst":"10.0.0.0/8"}]}}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","type":"mooring-ipam","prevResult":{"cniVersion":"1.1.0","ips":[]},"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`))
	f.Add([]byte(`{"ipam":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := ParseConfig(in)
		if err != nil {
			var ce *types.Error
			if !errors.As(err, &ce) {
				t.Fatalf("not a CNI error: %T %v", err, err)
			}
			return
		}
		if c.IPAM == nil || c.IPAM.Socket == "" || c.timeout <= 0 {
			t.Fatalf("accepted config without socket or timeout: %+v", c)
		}
		_ = c.NetConfForPrev()
		_ = result(c, ipamd.Allocation{IPs: []ipamd.IP{{Address: netip.MustParsePrefix("10.0.0.2/24"), Gateway: netip.MustParseAddr("10.0.0.1")}}})
	})
}
