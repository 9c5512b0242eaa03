//go:build !linux

package netlab

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// This file mirrors the Linux API so that dependent packages build
// everywhere; every entry point reports ErrUnsupported.

// Lab is a built lab (Linux only).
type Lab struct{}

// New reports ErrUnsupported.
func New(context.Context, Config) (*Lab, error) { return nil, ErrUnsupported }

// Check reports ErrUnsupported.
func Check() error { return ErrUnsupported }

func (*Lab) Nodes() []*Host    { return nil }
func (*Lab) Client() *Host     { return nil }
func (*Lab) Host(string) *Host { return nil }
func (*Lab) Config() Config    { return Config{} }
func (*Lab) Close() error      { return nil }

// Host is one namespace of the lab (Linux only).
type Host struct {
	Name    string
	Addr4   netip.Addr
	Addr6   netip.Addr
	MAC     net.HardwareAddr
	IfIndex int
}

func (*Host) NS() netns.NsHandle                 { return netns.None() }
func (*Host) Netlink() *netlink.Handle           { return nil }
func (*Host) Do(func() error) error              { return ErrUnsupported }
func (*Host) Interface() (*net.Interface, error) { return nil, ErrUnsupported }
func (*Host) AddAddr(string, netip.Prefix) error { return ErrUnsupported }
func (*Host) DelAddr(string, netip.Prefix) error { return ErrUnsupported }
func (*Host) SetLinkUp(string) error             { return ErrUnsupported }
func (*Host) SetLinkDown(string) error           { return ErrUnsupported }
func (*Host) Sysctl(string, string) error        { return ErrUnsupported }
func (*Host) Start(*exec.Cmd) (*Process, error)  { return nil, ErrUnsupported }
func (*Host) Neighbor(netip.Addr) (net.HardwareAddr, NeighState, error) {
	return nil, 0, ErrUnsupported
}

// NeighState is a neighbour-table entry state.
type NeighState int

func (s NeighState) String() string { return "NONE" }

// Process is a child process started inside a host's namespace.
type Process struct{ PID int }

func (*Process) Kill() error           { return ErrUnsupported }
func (*Process) Wait() error           { return ErrUnsupported }
func (*Process) Done() <-chan struct{} { return nil }

// Probe reports ErrUnsupported.
func Probe(context.Context, *Host, netip.Addr, time.Duration) ([]net.HardwareAddr, error) {
	return nil, ErrUnsupported
}

// ProbeInterface reports ErrUnsupported.
func ProbeInterface(context.Context, *net.Interface, netip.Addr, netip.Addr, time.Duration) ([]net.HardwareAddr, error) {
	return nil, ErrUnsupported
}

// Ping reports ErrUnsupported.
func Ping(context.Context, *Host, netip.Addr) error { return ErrUnsupported }
