// Package release makes the artefacts of a Mooring release next to the
// image `make image` builds: the Helm chart package, with the release's
// version and appVersion and the image pinned by digest, and the plain
// manifests of config/ with the same pinned image, plus a SHA256SUMS file.
// `make release VERSION=vX.Y.Z` runs it (go run ./hack/release).
//
// Every artefact is a function of the commit, the version and the image
// digest: files in sorted order, owner 0:0, every time the commit's
// (image.SourceDate), gzip without a name or time. It runs helm (helm
// package) and kubectl (kubectl kustomize) from the repository's cached
// builds and imports nothing from k8s.io.
package release
