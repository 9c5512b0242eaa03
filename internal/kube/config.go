package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// EnvKubeconfig is the environment variable kubectl reads: one path, or
// several joined by the OS's list separator (':'), merged like kubectl does.
const EnvKubeconfig = "KUBECONFIG"

// RESTConfig is the one rule every Mooring command uses to find its
// cluster: the kubeconfig file at path; when path is empty, the files in
// $KUBECONFIG; when that is unset too, the in-cluster configuration (the
// pod's ServiceAccount). It deliberately does not fall back to
// ~/.kube/config: the controller and the agent follow the same rule, and a
// component started by hand must not silently act on whatever cluster a
// personal file happens to name. The error says how to use that file.
//
// It also sets client-side rate limits. Mooring writes little, so the
// limits mostly bound start-up lists and a burst of status patches.
func RESTConfig(path string, qps float32, burst int) (*rest.Config, error) {
	cfg, err := load(path, os.Getenv(EnvKubeconfig))
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}

func load(path, env string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{}
	var from string
	switch {
	case path != "":
		rules.ExplicitPath, from = path, "--kubeconfig "+path
	case env != "":
		rules.Precedence, from = filepath.SplitList(env), "$KUBECONFIG="+env
	default:
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, noConfigError(err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig (%s): %w", from, err)
	}
	return cfg, nil
}

// ErrNoConfig means neither --kubeconfig, $KUBECONFIG nor an in-cluster
// configuration was there.
var ErrNoConfig = errors.New("no cluster to talk to")

func noConfigError(inCluster error) error {
	hint := "pass --kubeconfig FILE or set $KUBECONFIG"
	if home, err := os.UserHomeDir(); err == nil {
		def := filepath.Join(home, ".kube", "config")
		if _, err := os.Stat(def); err == nil {
			hint = fmt.Sprintf("to use %s, pass --kubeconfig %s or export KUBECONFIG=%s", def, def, def)
		}
	}
	return fmt.Errorf("%w: --kubeconfig is empty, $KUBECONFIG is unset and this is not a pod in a cluster (%v); %s",
		ErrNoConfig, inCluster, hint)
}

// BridgeLogs routes controller-runtime's and klog's logging into log, so a
// binary has one logger.
func BridgeLogs(log *slog.Logger) {
	l := logr.FromSlogHandler(log.Handler())
	ctrllog.SetLogger(l)
	klog.SetLogger(l)
}
