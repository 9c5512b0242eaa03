//go:build !linux

package kubelet

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
)

var errLinuxOnly = errors.New("kubelet: running Mooring's pods needs Linux namespaces")

func (k *kubelet) startMooring(context.Context, *corev1.Pod) (*pod, error) { return nil, errLinuxOnly }

// PodRun needs Linux.
func PodRun(context.Context, PodRunConfig) error { return errLinuxOnly }

func terminate(*pod) {}
