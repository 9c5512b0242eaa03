package cni

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// PluginName is the plugin's type in CNI configs.
const PluginName = "mooring-ipam"

// DefaultSocket is where the agent serves ipamd.
const DefaultSocket = "/run/mooring/ipamd.sock"

// IPAMConfig is the plugin's own part of the config.
type IPAMConfig struct {
	Type string `json:"type"`
	// Socket is the agent's unix socket (default DefaultSocket).
	Socket string `json:"socket,omitempty"`
	// Routes replace the default route per family; a route without gw goes
	// via the block's gateway of its family.
	Routes []*types.Route `json:"routes,omitempty"`
	// Timeout bounds one call to the agent (default 10s), e.g. "5s".
	Timeout string `json:"timeout,omitempty"`
}

// Config is the part of the network config the plugin reads.
type Config struct {
	CNIVersion string          `json:"cniVersion"`
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	IPAM       *IPAMConfig     `json:"ipam,omitempty"`
	Socket     string          `json:"socket,omitempty"` // chained role
	RawPrev    json.RawMessage `json:"prevResult,omitempty"`
	// ValidAttachments is set on GC (and the spec's earlier misspelling).
	ValidAttachments    []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
	ValidAttachmentsOld []types.GCAttachment `json:"cni.dev/attachments,omitempty"`

	// HasValidAttachments: the config carries a list of valid attachments
	// (possibly empty). Absent or null, a GC frees nothing.
	HasValidAttachments bool `json:"-"`
	// Chained is true when the plugin is its own list entry.
	Chained bool          `json:"-"`
	timeout time.Duration `json:"-"`
}

// ParseConfig reads the plugin's stdin. Every problem is a CNI decoding or
// invalid-config error; nothing in the input can make it panic.
func ParseConfig(stdin []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "mooring-ipam: config is not valid JSON", err.Error())
	}
	switch {
	case c.Type == PluginName && c.IPAM == nil:
		c.Chained = true
		c.IPAM = &IPAMConfig{Type: PluginName, Socket: c.Socket}
	case c.IPAM == nil:
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `mooring-ipam: no "ipam" section`, `set "ipam": {"type": "mooring-ipam"} in the network config`)
	case c.IPAM.Type != PluginName:
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("mooring-ipam: ipam type is %q", c.IPAM.Type), `set "ipam": {"type": "mooring-ipam"}`)
	}
	if c.IPAM.Socket == "" {
		c.IPAM.Socket = DefaultSocket
	}
	if !strings.HasPrefix(c.IPAM.Socket, "/") {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("mooring-ipam: socket %q is not an absolute path", c.IPAM.Socket), "")
	}
	c.timeout = 10 * time.Second
	if c.IPAM.Timeout != "" {
		d, err := time.ParseDuration(c.IPAM.Timeout)
		if err != nil || d <= 0 {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("mooring-ipam: timeout %q is not a positive duration such as 5s", c.IPAM.Timeout), "")
		}
		c.timeout = d
	}
	for i, r := range c.IPAM.Routes {
		if r == nil || r.Dst.IP == nil {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("mooring-ipam: routes[%d] has no dst", i), `write e.g. {"dst": "0.0.0.0/0"}`)
		}
	}
	c.HasValidAttachments = c.ValidAttachments != nil || c.ValidAttachmentsOld != nil
	if len(c.ValidAttachments) == 0 {
		c.ValidAttachments = c.ValidAttachmentsOld
	}
	return &c, nil
}

// podArgs reads K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID from
// CNI_ARGS ("K=V;K=V"); anything else is ignored.
func podArgs(args string) (namespace, pod, uid string) {
	for _, kv := range strings.Split(args, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			namespace = v
		case "K8S_POD_NAME":
			pod = v
		case "K8S_POD_UID":
			uid = v
		}
	}
	return namespace, pod, uid
}

func ipNet(ip net.IP, bits int) *net.IPNet {
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, len(ip)*8)}
}

// NetConfForPrev returns the standard NetConf carrying the raw prevResult,
// for version.ParsePrevResult.
func (c *Config) NetConfForPrev() types.NetConf {
	var raw map[string]any
	if len(c.RawPrev) > 0 {
		_ = json.Unmarshal(c.RawPrev, &raw)
	}
	return types.NetConf{CNIVersion: c.CNIVersion, Name: c.Name, Type: c.Type, RawPrevResult: raw}
}
