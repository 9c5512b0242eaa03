package announce

import "testing"

// A policy's serviceSelector sees each Service's namespace and name as the
// virtual labels, over a real label of the same key, in Decide and State
// alike; Labels themselves carry only the Service's own labels.
func TestVirtualServiceLabels(t *testing.T) {
	in := lab("node-1")
	in.Policies = []Policy{{Name: "web-only", LoadBalancerIPs: true, ServiceSelector: &Selector{
		MatchLabels: map[string]string{LabelServiceName: "web"},
		MatchExpressions: []Requirement{{Key: LabelServiceNamespace, Operator: OpIn, Values: []string{"default"}},
			{Key: "tier", Operator: OpIn, Values: []string{"gold"}}}}}}
	in.Services = []Service{
		{Key: key("web"), Labels: map[string]string{"tier": "gold"}, IngressIPs: ips("10.213.0.1")},
		{Key: key("api"), Labels: map[string]string{"tier": "gold", LabelServiceName: "web"}, IngressIPs: ips("10.213.0.2")},
		{Key: ServiceKey{Namespace: "other", Name: "web"}, Labels: map[string]string{"tier": "gold"}, IngressIPs: ips("10.213.0.3")},
		{Key: key("web2"), IngressIPs: ips("10.213.0.4")},
	}
	st := NewState("node-1")
	st.SetPolicies(in.Policies)
	st.SetNodes(in.Nodes)
	st.SetMembers(in.Members)
	st.SetInterfaces(in.Interfaces)
	for _, s := range in.Services {
		st.SetService(&s)
	}
	for name, r := range map[string]Result{"Decide": Decide(in), "State": st.Result()} {
		if len(r.Owners) != 1 || r.Owners[0].Addr != ip("10.213.0.1") {
			t.Fatalf("%s: announced %v, want only web's 10.213.0.1", name, r.Owners)
		}
	}
}
