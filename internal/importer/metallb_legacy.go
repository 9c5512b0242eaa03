package importer

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// MetalLB before 0.13 read one ConfigMap (usually metallb-system/config)
// whose "config" key holds YAML.

type legacyPool struct {
	Name              string   `json:"name"`
	Protocol          string   `json:"protocol"`
	Addresses         []string `json:"addresses"`
	AutoAssign        *bool    `json:"auto-assign"`
	AvoidBuggyIPs     bool     `json:"avoid-buggy-ips"`
	BGPAdvertisements []any    `json:"bgp-advertisements"`
}

type legacyConfig struct {
	Peers          []map[string]any `json:"peers"`
	BGPCommunities map[string]any   `json:"bgp-communities"`
	BFDProfiles    []map[string]any `json:"bfd-profiles"`
	Pools          []legacyPool     `json:"address-pools"`
}

var legacyFields = fields{
	"peers": leaf, "bgp-communities": leaf, "bfd-profiles": leaf,
	"address-pools": {"[]": {"name": leaf, "protocol": leaf, "addresses": leaf, "auto-assign": leaf,
		"avoid-buggy-ips": leaf, "bgp-advertisements": leaf}},
}

type configMap struct {
	Data map[string]string `json:"data"`
}

func (m *metallbImporter) configMap(o *object, rec recorder) error {
	var cm configMap
	if err := o.decodeInto(&cm); err != nil {
		return err
	}
	raw, ok := cm.Data["config"]
	if !ok {
		rec.notMapped("data", "ConfigMap has no \"config\" key, so it is not MetalLB's pre-0.13 configuration: not imported")
		return nil
	}
	for k := range cm.Data {
		if k != "config" {
			rec.notMapped("data."+k, "only the \"config\" key holds MetalLB configuration: not imported")
		}
	}
	js, err := yaml.YAMLToJSON([]byte(raw))
	if err != nil {
		return o.errorf("data.config", "not valid YAML: %v", err)
	}
	var generic map[string]any
	var cfg legacyConfig
	if err := yaml.Unmarshal(js, &generic); err != nil {
		return o.errorf("data.config", "must be a YAML object with address-pools: %v", err)
	}
	if err := yaml.Unmarshal(js, &cfg); err != nil {
		return o.errorf("data.config", "%v", err)
	}
	for _, f := range unknownFields("", generic, legacyFields) {
		rec.notMapped("data.config: "+f, "field unknown to the importer: not imported; check whether it matters and set its equivalent by hand")
	}
	for i, p := range cfg.Peers {
		rec.notMapped(fmt.Sprintf("data.config: peers[%d]", i), "BGP peer %v of the pre-0.13 ConfigMap is not imported: convert the ConfigMap to MetalLB's CRDs (BGPPeer) and import those", p["peer-address"])
	}
	for k := range cfg.BGPCommunities {
		rec.notMapped("data.config: bgp-communities."+k, "BGP communities of the pre-0.13 ConfigMap are not imported: convert the ConfigMap to MetalLB's CRDs (Community) and import those")
	}
	for i, p := range cfg.BFDProfiles {
		rec.notMapped(fmt.Sprintf("data.config: bfd-profiles[%d]", i), "BFD profile %v of the pre-0.13 ConfigMap is not imported: convert the ConfigMap to MetalLB's CRDs (BFDProfile) and import those", p["name"])
	}
	seen := map[string]bool{}
	for i, p := range cfg.Pools {
		prefix := fmt.Sprintf("data.config: address-pools[%d].", i)
		if p.Name == "" {
			return o.errorf(prefix+"name", "every address pool needs a name")
		}
		if seen[p.Name] {
			return o.errorf(prefix+"name", "pool %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		pr := recorder{rep: rec.rep, src: rec.src, kind: "ConfigMap " + o.ref() + " address-pool", obj: p.Name}
		in := &mlbPoolIn{rec: pr, name: p.Name, prefix: prefix, autoKey: "auto-assign", buggyKey: "avoid-buggy-ips", bgpAdvKey: "bgp-advertisements",
			spec: mlbPoolSpec{Addresses: p.Addresses, AutoAssign: p.AutoAssign, AvoidBuggyIPs: p.AvoidBuggyIPs,
				Protocol: p.Protocol, BGPAdvertisements: p.BGPAdvertisements}}
		if err := m.protocol(in, o.src, prefix+"protocol", p.Protocol); err != nil {
			return err
		}
		m.pools = append(m.pools, in)
	}
	if len(cfg.Pools) == 0 {
		rec.notMapped("data.config: address-pools", "no address pools: nothing to import")
	}
	return nil
}
