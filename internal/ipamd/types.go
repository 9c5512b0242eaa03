package ipamd

import (
	"errors"
	"net/netip"

	"github.com/mooringlb/mooring/internal/podipam"
)

// Sentinel errors. The server maps them to CNI error codes.
var (
	// ErrNoBlock: the pod's pool has no block (of some family) on this node
	// yet, or every block is full; the request is counted as pending so the
	// node asks the controller for more, and the runtime retries.
	ErrNoBlock = errors.New("no free address in this node's blocks")
	// ErrNotFound: no allocation for that container and interface.
	ErrNotFound = errors.New("no allocation for this container and interface")
	// ErrLocked: another ipamd holds the store.
	ErrLocked = errors.New("the allocation store is locked by another ipamd")
	// ErrBadRequest: a request without container ID or interface name.
	ErrBadRequest = errors.New("bad request")
	// ErrUnavailable: the pod's pool cannot be determined now (an API
	// error, the plugin's deadline passed): nothing is allocated, never
	// from another pool; the runtime retries.
	ErrUnavailable = errors.New("the pod's pool cannot be determined now")
	// ErrNoPool: the pool the pod or its namespace names does not exist.
	ErrNoPool = errors.New("the pod's pool does not exist")
	// ErrPoolExhausted: the controller says it cannot cut another block of
	// the pod's pool for this node (exhausted, invalid or conflicting).
	ErrPoolExhausted = errors.New("the controller cannot cut another block of the pod's pool")
)

// Key identifies an attachment, as CNI does: network, container and
// interface. With several networks using mooring-ipam on one node (Multus),
// each network's attachments are its own, and one network's GC never
// touches another's.
type Key struct {
	// Network is the CNI network's name (the config's "name"). It is empty
	// in allocations stored before keys carried it, and in requests of a
	// plugin from before then: such an allocation's network is unknown
	// until a request names it (Allocator.lookup adopts it).
	Network     string `json:"network,omitempty"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// legacy is k without its network: the key an allocation stored before
// keys carried the network has.
func (k Key) legacy() Key { return Key{ContainerID: k.ContainerID, IfName: k.IfName} }

// IP is one allocated address: Address carries the block's prefix length.
type IP struct {
	Address netip.Prefix `json:"address"`
	Gateway netip.Addr   `json:"gateway"`
}

// Allocation is what one ADD got.
type Allocation struct {
	Key
	Pool      string `json:"pool"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	// PodUID is the pod's UID (CNI_ARGS K8S_POD_UID, which containerd and
	// CRI-O pass): it tells a pod from a later one of the same name.
	PodUID string `json:"podUID,omitempty"`
	IPs    []IP   `json:"ips"`
}

// AddRequest is an ADD as the plugin sends it.
type AddRequest struct {
	Key
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"podUID,omitempty"`
}

// Pool is what the node holds of one pool: the families the pool has (an
// address of each is handed out) and the node's blocks of it.
type Pool struct {
	Families []podipam.Family `json:"families"`
	Blocks   []netip.Prefix   `json:"blocks"`
	// Exhausted is the controller's word that it cannot cut another block
	// of this pool for the node; ADD errors quote it.
	Exhausted string `json:"exhausted,omitempty"`
}
