//go:build !linux

package kubelet

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
)

var errNoPodNet = errors.New("kubelet: pod networking needs Linux")

type podProcess struct {
	stopping atomic.Bool
	done     chan struct{}
}

func (*podProcess) pid() int       { return 0 }
func (*podProcess) exitErr() error { return errNoPodNet }
func (*podProcess) kill()          {}

func startPodProcess(Config, *corev1.Pod, *pod) (*podProcess, error) { return nil, errNoPodNet }

type staticNet struct{}

func newStaticNet([]netip.Prefix) *staticNet                     { return &staticNet{} }
func (*staticNet) ready(context.Context) error                   { return errNoPodNet }
func (*staticNet) status(context.Context) error                  { return errNoPodNet }
func (*staticNet) wire(context.Context, *corev1.Pod, *pod) error { return errNoPodNet }
func (*staticNet) unwire(context.Context, *pod)                  {}
func newCNINet(CNIConfig, *slog.Logger) (network, error)         { return nil, errNoPodNet }
