package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runBuildScript runs hack/kubebin/build.sh with env and a stand-in `go`
// on PATH that only creates the -o file and logs its call in calls.
func runBuildScript(t *testing.T, env []string, calls string) string {
	t.Helper()
	fake := t.TempDir()
	script := `#!/bin/sh
echo "$@" >> ` + calls + `
while [ $# -gt 0 ]; do
  if [ "$1" = -o ]; then shift; printf '#!/bin/sh\n' > "$1"; chmod +x "$1"; fi
  shift
done
`
	if err := os.WriteFile(filepath.Join(fake, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../../hack/kubebin/build.sh")
	cmd.Env = append([]string{"PATH=" + fake + ":/usr/bin:/bin"}, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// The control-plane binaries are cached per user, so that a second clone
// of the repository finds them: under $XDG_CACHE_HOME, else $HOME/.cache,
// else $MOORING_KUBEBIN_CACHE when set; a warm cache builds nothing, and
// `current` names the newest build, where FindKubeBin looks.
func TestKubeBinCacheIsPerUser(t *testing.T) {
	key := regexp.MustCompile(`^[0-9a-f]{16}$`)
	home, xdg, own := t.TempDir(), t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"HOME", []string{"HOME=" + home}, filepath.Join(home, ".cache", "mooring", "kubebin")},
		{"XDG_CACHE_HOME", []string{"HOME=" + home, "XDG_CACHE_HOME=" + xdg}, filepath.Join(xdg, "mooring", "kubebin")},
		{EnvKubeBinCache, []string{"HOME=" + home, "XDG_CACHE_HOME=" + xdg, EnvKubeBinCache + "=" + own}, own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := filepath.Join(t.TempDir(), "calls")
			out := runBuildScript(t, tc.env, calls)
			if filepath.Dir(out) != tc.want || !key.MatchString(filepath.Base(out)) {
				t.Fatalf("built into %s, want %s/<key>", out, tc.want)
			}
			for _, b := range append(kubeBinaries, "kubectl", "kube-scheduler") {
				if _, err := os.Stat(filepath.Join(out, b)); err != nil {
					t.Errorf("%s missing: %v", b, err)
				}
			}
			if cur, err := os.Readlink(filepath.Join(tc.want, "current")); err != nil || cur != filepath.Base(out) {
				t.Errorf("current -> %q (%v), want %s", cur, err, filepath.Base(out))
			}
			first, _ := os.ReadFile(calls)
			// A second clone (or a second run) finds the cache warm.
			if again := runBuildScript(t, tc.env, calls); again != out {
				t.Errorf("second run: %s, want %s", again, out)
			}
			if second, _ := os.ReadFile(calls); string(second) != string(first) {
				t.Errorf("a warm cache ran go build again:\n%s", second[len(first):])
			}
			t.Setenv("XDG_CACHE_HOME", "")
			t.Setenv(EnvKubeBinCache, "")
			for _, e := range tc.env {
				k, v, _ := strings.Cut(e, "=")
				t.Setenv(k, v)
			}
			t.Setenv(EnvKubeBin, "")
			if got := FindKubeBin(); got != filepath.Join(tc.want, "current") {
				t.Errorf("FindKubeBin() = %q, want %s/current", got, tc.want)
			}
		})
	}
}

// A build waiting on another build's lock says so, naming the process
// that holds it (its PID, recorded in the lock file), and every cached
// build script (hack/*/build.sh) takes its cache's lock that way.
func TestBuildWaitNamesTheHolder(t *testing.T) {
	fake, cache := t.TempDir(), t.TempDir()
	// A slow stand-in `go`: the first build takes a few seconds.
	script := `#!/bin/sh
sleep 0.5
while [ $# -gt 0 ]; do
  if [ "$1" = -o ]; then shift; printf '#!/bin/sh\n' > "$1"; chmod +x "$1"; fi
  shift
done
`
	if err := os.WriteFile(filepath.Join(fake, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	build := func() (*exec.Cmd, *strings.Builder) {
		cmd := exec.Command("bash", "../../hack/kubebin/build.sh")
		cmd.Env = []string{"PATH=" + fake + ":/usr/bin:/bin", "HOME=" + t.TempDir(), EnvKubeBinCache + "=" + cache}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &stderr
	}
	first, firstErr := build()
	holder := fmt.Sprintf("PID %d (kubebin", first.Process.Pid)
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(cache, ".lock"))
		if strings.HasPrefix(string(b), holder) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock file never named the first build (%q):\n%s", b, firstErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	second, secondErr := build()
	if err := first.Wait(); err != nil {
		t.Fatalf("first build: %v\n%s", err, firstErr)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second build: %v\n%s", err, secondErr)
	}
	for _, want := range []string{"kubebin: waiting for another build of the same cache to finish: " + holder, "kubebin: the other build finished after"} {
		if !strings.Contains(secondErr.String(), want) {
			t.Errorf("the waiting build does not say %q:\n%s", want, secondErr)
		}
	}
	for _, want := range []string{"kubebin: building etcd, kube-apiserver", "because nothing is cached in " + cache, "expect 9-19 min", "kubebin: built in"} {
		if !strings.Contains(firstErr.String(), want) {
			t.Errorf("the first build does not say %q:\n%s", want, firstErr)
		}
	}
	scripts, _ := filepath.Glob("../../hack/*/build.sh")
	if len(scripts) < 4 {
		t.Fatalf("found %d build scripts", len(scripts))
	}
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []string{"/lib/cache.sh", "cache_lock ", "cache_start ", "cache_done "} {
			if !strings.Contains(string(b), call) {
				t.Errorf("%s lacks %q: every cached build takes its lock and says what it builds", s, call)
			}
		}
	}
}

// The cache key covers what a build is made of, not how a build script
// talks: editing a comment or a message rebuilds nothing, editing a
// command does.
func TestCacheKeyIgnoresCommentsAndMessages(t *testing.T) {
	dir := t.TempDir()
	key := func(script string) string {
		p := filepath.Join(dir, "build.sh")
		if err := os.WriteFile(p, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("bash", "-c", `. ../../hack/lib/cache.sh && cache_key "$1" ../../hack/kubebin/go.mod`, "_", p).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	base := key("set -e\n# builds it\necho building >&2\ncache_start x y z\ngo build -o out ./x\n")
	if k := key("set -e\n# builds it, now with more words\n\necho \"building, slowly\" >&2\ncache_start x y z w\ngo build -o out ./x\n"); k != base {
		t.Errorf("a comment or message edit changed the key: %s -> %s", base, k)
	}
	if k := key("set -e\n# builds it\necho building >&2\ncache_start x y z\ngo build -trimpath -o out ./x\n"); k == base {
		t.Error("a changed go build command kept the key")
	}
}
