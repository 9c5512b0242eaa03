//go:build !linux

package kubelet

import (
	"errors"
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
func wirePod([]netip.Prefix, *pod) error                             { return errNoPodNet }
func unwirePod(*pod)                                                 {}
