package kubelet

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// makeMounts in a mount namespace of its own (one locked thread, never
// unlocked, so the runtime discards it): the token folder appears at the
// in-cluster path and a Secret at a path whose parents do not exist, both
// read-only, and none of it on the host.
func TestMakeMountsLeavesTheHostAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (mount namespaces)")
		}
		t.Skip("needs root (mount namespaces)")
	}
	dir := t.TempDir()
	sa, key, scratch := filepath.Join(dir, "sa"), filepath.Join(dir, "key"), filepath.Join(dir, "scratch")
	for _, d := range []string{sa, key, scratch} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sa, "token"), []byte("tok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(key, "keys"), []byte("k1\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	// A target below a folder that does not exist on the host.
	secretDir := filepath.Join("/etc", "mooring-test-"+filepath.Base(dir), "gossip")
	_, err := os.Stat("/run/secrets/kubernetes.io")
	hostHadSecrets := err == nil
	binds := []Mount{{Source: sa, Target: ServiceAccountDir, ReadOnly: true}, {Source: key, Target: secretDir, ReadOnly: true}}

	type result struct {
		token, keys string
		roErr       error
		err         error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		var r result
		defer func() { ch <- r }()
		if r.err = unix.Unshare(unix.CLONE_NEWNS); r.err != nil {
			return
		}
		if r.err = makeMounts(scratch, binds); r.err != nil {
			return
		}
		b, err := os.ReadFile(filepath.Join(ServiceAccountDir, "token"))
		r.token, r.err = string(b), err
		if r.err != nil {
			return
		}
		b, r.err = os.ReadFile(filepath.Join(secretDir, "keys"))
		r.keys = string(b)
		r.roErr = os.WriteFile(filepath.Join(ServiceAccountDir, "x"), nil, 0o644)
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.token != "tok" || r.keys != "k1\n" {
		t.Errorf("inside the pod: token %q, keys %q", r.token, r.keys)
	}
	if r.roErr == nil {
		t.Error("the token folder is writable")
	}
	for _, p := range []string{filepath.Dir(secretDir), "/run/secrets/kubernetes.io", filepath.Join(sa, "x")} {
		if p == "/run/secrets/kubernetes.io" && hostHadSecrets {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists on the host", p)
			if p != filepath.Join(sa, "x") {
				os.RemoveAll(p)
			}
		}
	}
}
