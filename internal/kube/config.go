package kube

import (
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// RESTConfig loads a kubeconfig file, or the in-cluster config when path is
// empty, and sets client-side rate limits. Mooring writes little, so the
// limits mostly bound start-up lists and a burst of status patches.
func RESTConfig(path string, qps float32, burst int) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if path == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
		}
	}
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}

// BridgeLogs routes controller-runtime's and klog's logging into log, so a
// binary has one logger.
func BridgeLogs(log *slog.Logger) {
	l := logr.FromSlogHandler(log.Handler())
	ctrllog.SetLogger(l)
	klog.SetLogger(l)
}
