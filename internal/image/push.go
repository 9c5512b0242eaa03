package image

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ReadLayout returns the image index WriteLayout stored in dir.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image: %s is not an OCI layout (run make image first): %w", dir, err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("image: layout %s holds %d entries, want the one make image writes", dir, len(m.Manifests))
	}
	return root.ImageIndex(m.Manifests[0].Digest)
}

// Push uploads the index (and every image and blob in it) to ref, with
// credentials from the Docker config (~/.docker/config.json) when present.
// Registries on localhost and private addresses are reached over HTTP.
func Push(ctx context.Context, idx v1.ImageIndex, ref string, opts ...remote.Option) (name.Digest, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return name.Digest{}, fmt.Errorf("image: IMAGE %q: %w (want registry/repository:tag)", ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("image: push %s: %w", ref, err)
	}
	return r.Context().Digest(digest.String()), nil
}
