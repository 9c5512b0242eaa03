package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// testVersion is what the real builds stamp.
const testVersion = "v0.0.0-imagetest"

var (
	buildOnce sync.Once
	built     Result
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = filepath.Dir(dir)
	}
}

func needCACerts(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(DefaultCACerts); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (make deps installs ca-certificates)", err)
		}
		t.Skip(err)
	}
}

func realBuild(t *testing.T, out string) Result {
	t.Helper()
	start := time.Now()
	res, err := Build(context.Background(), Options{Dir: moduleRoot(t), Out: out, Version: testVersion, Created: testCreated})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %s", res.Digest, time.Since(start).Round(time.Millisecond))
	return res
}

// image builds the real image once for the package (both platforms).
func image(t *testing.T) Result {
	t.Helper()
	needCACerts(t)
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "mooring-image-test-")
		if buildErr == nil {
			built = realBuild(t, buildDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if built.Archive == "" {
		t.Fatal("the shared image build failed in an earlier test")
	}
	return built
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// make image twice from the same source: the same index digest and a
// byte-identical archive. The second build writes to the same folder, as a
// second `make image` does, so Go finds the binaries up to date instead of
// linking them again (Go's own builds are reproducible with -trimpath; what
// this proves is that packaging adds nothing that varies: times, order,
// owners).
func TestBuildIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles mooring for two platforms")
	}
	a := image(t)
	sum := fileSum(t, a.Archive)
	b := realBuild(t, filepath.Dir(a.Archive))
	if a.Digest != b.Digest {
		t.Fatalf("two builds of the same source: %s and %s", a.Digest, b.Digest)
	}
	if fileSum(t, b.Archive) != sum {
		t.Error("same index digest, but the OCI archives differ")
	}
	im, err := a.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range im.Manifests {
		plats = append(plats, d.Platform.String())
	}
	sort.Strings(plats)
	if strings.Join(plats, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", plats)
	}
}

// The archive runs as a container under podman + runc, and `mooring
// version` inside prints the stamped version and commit.
func TestPodmanRunsTheImage(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles mooring for two platforms")
	}
	podman, err := exec.LookPath("podman")
	if err == nil {
		_, err = exec.LookPath("runc")
	}
	if err == nil && os.Geteuid() != 0 {
		err = os.ErrPermission
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("podman and runc (as root) are needed: %v (make deps installs them)", err)
		}
		t.Skipf("podman and runc as root are needed: %v (make deps installs them)", err)
	}
	arc := image(t).Archive
	// A storage of its own (vfs: no overlay-on-overlay trouble), removed
	// afterwards, so the test leaves nothing in the host's podman store.
	store := t.TempDir()
	base := []string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}
	t.Cleanup(func() {
		// vfs layers are plain folders; podman's own reset removes them.
		_ = exec.Command(podman, append(base, "system", "reset", "--force")...).Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(runArgs ...string) string {
		args := append(append([]string(nil), base...),
			"--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
			"run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
		args = append(args, runArgs...)
		cmd := exec.CommandContext(ctx, podman, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		t.Logf("podman run took %s", time.Since(start).Round(time.Millisecond))
		return stdout.String()
	}
	out := run("oci-archive:"+arc, "version")
	want := "mooring " + testVersion + " "
	// The commit is stamped too (the binary carries no VCS stamp of Go's).
	if rev := gitRevision(ctx, moduleRoot(t)); rev != "" {
		want += "(commit " + rev + ","
	}
	if !strings.HasPrefix(out, want) {
		t.Errorf("`mooring version` in the container printed %q, want it to start with %q", out, want)
	}
	// The CNI plugin the agent's init container copies to the node is
	// there, static, and answers the CNI VERSION command.
	out = run("--entrypoint", IPAMPluginPath, "--env", "CNI_COMMAND=VERSION", "oci-archive:"+arc)
	if !strings.Contains(out, `"supportedVersions"`) || !strings.Contains(out, `"1.1.0"`) {
		t.Errorf("CNI_COMMAND=VERSION %s in the container printed %q, want the supported versions with 1.1.0", IPAMPluginPath, out)
	}
	// The chart's init container (templates/agent.yaml) as podman runs it:
	// root, no capabilities, a read-only root; the host folder receives the
	// image's plugin, byte for byte.
	host := t.TempDir()
	run("--user", "0", "--cap-drop", "ALL", "--read-only", "--volume", host+":/host/cni-bin",
		"oci-archive:"+arc, "agent", "install-cni", "--from="+IPAMPluginPath, "--to=/host/cni-bin")
	got, err := os.ReadFile(filepath.Join(host, "mooring-ipam"))
	if err != nil {
		t.Fatalf("install-cni in the container: %v", err)
	}
	sum := fileSum(t, filepath.Join(filepath.Dir(arc), "bin", HostPlatform().OS+"-"+HostPlatform().Arch, "mooring-ipam"))
	if sha256.Sum256(got) != sum {
		t.Error("install-cni wrote a file that differs from the image's mooring-ipam")
	}
	if st, err := os.Stat(filepath.Join(host, "mooring-ipam")); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o755 {
		t.Errorf("installed plugin mode %v, want 0755 (the runtime execs it)", st.Mode())
	}
}

// make push: push the index to an in-process registry, pull it back, the
// digests agree and both platforms are there.
func TestPushAndPull(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles mooring for two platforms")
	}
	res := image(t)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref := u.Host + "/mooring/mooring:" + testVersion
	idx, err := ReadLayout(res.Layout)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := Push(context.Background(), idx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if pushed.DigestStr() != res.Digest.String() {
		t.Errorf("pushed %s, built %s", pushed.DigestStr(), res.Digest)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	back, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	if d := digest(t, back); d != res.Digest {
		t.Fatalf("pulled %s, pushed %s", d, res.Digest)
	}
	im, err := back.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("pulled index has %d manifests, want 2", len(im.Manifests))
	}
	for _, d := range im.Manifests {
		img, err := remote.Image(r.Context().Digest(d.Digest.String()), remote.WithPlatform(*d.Platform))
		if err != nil {
			t.Fatalf("pull %s: %v", d.Platform, err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("%s: %d layers, %v", d.Platform, len(layers), err)
		}
		rc, err := layers[1].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n == 0 {
			t.Errorf("%s: binary layer unreadable (%d bytes, %v)", d.Platform, n, err)
		}
	}
}
