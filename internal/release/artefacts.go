package release

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// ChartDir is the chart in the repository.
const ChartDir = "charts/mooring"

// Chart packages the chart with helm as chart version chartVersion and
// appVersion o.Version, its default image pinned to o.ImageRepo@o.Digest,
// and normalizes the archive (Normalize).
func Chart(ctx context.Context, o Options, chartVersion string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "mooring-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(o.Root, ChartDir)
	dst := filepath.Join(tmp, "mooring")
	if err := copyTree(src, dst); err != nil {
		return nil, fmt.Errorf("release: copying %s: %w", src, err)
	}
	values := filepath.Join(dst, "values.yaml")
	b, err := os.ReadFile(values)
	if err != nil {
		return nil, err
	}
	if b, err = PinValues(b, o.ImageRepo, o.Digest); err != nil {
		return nil, err
	}
	if err := os.WriteFile(values, b, 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, "out")
	env := []string{"HELM_CACHE_HOME=" + tmp + "/helm/cache", "HELM_CONFIG_HOME=" + tmp + "/helm/config", "HELM_DATA_HOME=" + tmp + "/helm/data"}
	if _, err := run(ctx, tmp, env, o.Helm, "package", dst, "--version", chartVersion, "--app-version", o.Version, "--destination", out); err != nil {
		return nil, err
	}
	tgz, err := os.ReadFile(filepath.Join(out, "mooring-"+chartVersion+".tgz"))
	if err != nil {
		return nil, fmt.Errorf("release: helm package wrote no mooring-%s.tgz: %w", chartVersion, err)
	}
	return Normalize(tgz, o.Created)
}

var (
	valuesRepo   = regexp.MustCompile(`(?m)^  repository: \S+$`)
	valuesDigest = regexp.MustCompile(`(?m)^  digest: ""$`)
)

// PinValues sets image.repository and image.digest in the chart's
// values.yaml (its first "  repository:" and "  digest:" lines, under
// image:), keeping every comment.
func PinValues(values []byte, repo, digest string) ([]byte, error) {
	img := bytes.Index(values, []byte("\nimage:\n"))
	if img < 0 {
		return nil, fmt.Errorf("release: values.yaml has no image: block")
	}
	head, rest := values[:img], values[img:]
	r := valuesRepo.FindIndex(rest)
	d := valuesDigest.FindIndex(rest)
	if r == nil || d == nil {
		return nil, fmt.Errorf(`release: values.yaml's image block lacks "  repository:" or "  digest: \"\"" (was the chart edited? pin by hand)`)
	}
	var out bytes.Buffer
	out.Write(head)
	// repository comes before digest in values.yaml.
	out.Write(rest[:r[0]])
	fmt.Fprintf(&out, "  repository: %s", repo)
	out.Write(rest[r[1]:d[0]])
	fmt.Fprintf(&out, "  digest: %q", digest)
	out.Write(rest[d[1]:])
	return out.Bytes(), nil
}

var imageLine = regexp.MustCompile(`(?m)^(\s*(?:- )?image: )"?([^"\s]+)"?$`)

// Manifests renders config/ as one file: the CRDs, then `kubectl
// kustomize` of config/controller and config/agent, every Mooring image
// pinned to o.ImageRepo@o.Digest.
func Manifests(ctx context.Context, o Options) ([]byte, error) {
	crds, err := filepath.Glob(filepath.Join(o.Root, "config", "crd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return nil, fmt.Errorf("release: no CRDs in config/crd (run make generate)")
	}
	sort.Strings(crds)
	var docs []string
	for _, f := range crds {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		docs = append(docs, strings.TrimPrefix(strings.TrimSpace(string(b)), "---\n"))
	}
	for _, k := range []string{"config/controller", "config/agent"} {
		b, err := run(ctx, o.Root, nil, o.Kubectl, "kustomize", k)
		if err != nil {
			return nil, err
		}
		docs = append(docs, strings.TrimSpace(string(b)))
	}
	pinned := o.ImageRepo + "@" + o.Digest
	body := strings.Join(docs, "\n---\n") + "\n"
	n := 0
	body = imageLine.ReplaceAllStringFunc(body, func(line string) string {
		m := imageLine.FindStringSubmatch(line)
		if !strings.Contains(m[2], "mooring") {
			return line
		}
		n++
		return m[1] + pinned
	})
	if n == 0 {
		return nil, fmt.Errorf("release: no Mooring image in config/'s manifests to pin")
	}
	head := fmt.Sprintf("# Mooring %s: CRDs, controller and agent (config/), image %s.\n# Made by `make release VERSION=%s`; apply with kubectl apply --server-side -f (docs/install.md).\n---\n", o.Version, pinned, o.Version)
	return []byte(head + body), nil
}

// copyTree copies the regular files under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}
