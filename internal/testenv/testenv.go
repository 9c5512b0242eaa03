// Package testenv starts the real control plane every integration test uses:
// etcd and kube-apiserver built from Go modules by hack/kubebin, with
// Mooring's CRDs from config/crd installed and the Service CIDR widened, and
// optionally kube-controller-manager with the endpointslice and
// node-lifecycle controllers.
//
// It is for tests and the lab only; nothing in a pure core imports it.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/mooringlb/mooring/internal/kube"
)

// EnvBinDir names the folder holding etcd, kube-apiserver and
// kube-controller-manager; make test sets it from `make kubebin`.
const EnvBinDir = "MOORING_KUBEBIN"

// ServiceCIDR replaces envtest's IPv4 /24: wide enough that LoadBalancer-heavy
// tests do not run out of ClusterIPs, and dual-stack so IPv6 and dual-stack
// Services (which LB-IPAM must serve) are admitted.
const ServiceCIDR = "10.96.0.0/16,fd00:10:96::/108"

// Env is a running control plane.
type Env struct {
	*envtest.Environment
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	// Client is a controller-runtime client with Mooring's scheme.
	Client client.Client
	// Clientset is a typed client-go clientset.
	Clientset kubernetes.Interface
	// BinDir is where the control-plane binaries were found.
	BinDir string
}

// RepoRoot returns the repository root (the folder holding go.mod).
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("testenv: cannot locate own source file")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod above " + filepath.Dir(file))
		}
		dir = parent
	}
}

// BinDir finds the control-plane binaries: $MOORING_KUBEBIN, else the
// newest `make kubebin` output in the per-user cache
// ($MOORING_KUBEBIN_CACHE, else <user cache dir>/mooring/kubebin, then
// /current), as hack/kubebin/build.sh writes it.
func BinDir() (string, error) {
	dir := os.Getenv(EnvBinDir)
	if dir == "" {
		cache := os.Getenv("MOORING_KUBEBIN_CACHE")
		if cache == "" {
			uc, err := os.UserCacheDir()
			if err != nil {
				return "", fmt.Errorf("control-plane binaries: no user cache dir (%w): set %s", err, EnvBinDir)
			}
			cache = filepath.Join(uc, "mooring", "kubebin")
		}
		dir = filepath.Join(cache, "current")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("control-plane binary %s not found in %s: run `make kubebin` (or set %s)", b, dir, EnvBinDir)
		}
	}
	return dir, nil
}

// Start starts etcd and kube-apiserver with the CRDs installed and returns
// the running environment. Callers must Stop it.
func Start() (*Env, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: bin,
		// envtest's 20 s is too short on a 2-core CI machine running
		// several packages' control planes at once (a CI run saw
		// kube-apiserver miss it 5 times at load 24).
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", ServiceCIDR)
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves etcd and kube-apiserver running when a later step
		// (e.g. installing a CRD the apiserver rejects) fails.
		_ = env.Stop()
		return nil, fmt.Errorf("start control plane from %s: %w", bin, err)
	}
	// Tests create thousands of objects; client-go's default 5 QPS would
	// measure the rate limiter, not Mooring.
	cfg.QPS, cfg.Burst = 500, 1000
	e := &Env{Environment: env, Config: cfg, BinDir: bin}
	if e.Client, err = client.New(cfg, client.Options{Scheme: kube.Scheme()}); err != nil {
		_ = env.Stop()
		return nil, err
	}
	if e.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return e, nil
}

// StartT starts the control plane for a test and stops it at cleanup. When
// the binaries are missing it skips, except under CI=true where it fails:
// CI builds them first, so their absence there is a real error.
func StartT(t testing.TB) *Env {
	t.Helper()
	if _, err := BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	e, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Logf("stop control plane: %v", err)
		}
	})
	return e
}

// KubeconfigFile writes a kubeconfig for an admin user into dir and returns
// its path; child processes (agents, controller, kube-controller-manager)
// use it.
func (e *Env) KubeconfigFile(dir, user string) (string, error) {
	u, err := e.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", user, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, user+".kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}
