# Mooring's two commands are `make demo` and `make test`; the rest are parts.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
CONTROLLER_GEN := bin/controller-gen
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build test demo deps kubebin generate verify vet unit bench clean image push helm release labimages containerd

all: build

build:
	$(GO) build -ldflags "-X github.com/mooringlb/mooring/internal/buildinfo.Version=$(VERSION)" -o bin/mooring ./cmd/mooring
	ln -f bin/mooring bin/kubectl-mooring # the kubectl plugin: the same binary, named for kubectl
	# static (no cgo): no dynamic loader at every exec, ~1 ms less per CNI call
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X github.com/mooringlb/mooring/internal/buildinfo.Version=$(VERSION)" -o bin/mooring-ipam ./cmd/mooring-ipam

# deps installs what the tests use from Debian's packages (as root; no-op when present).
deps:
	hack/install-deps.sh

# kubebin builds etcd, kube-apiserver, kube-controller-manager, kube-proxy,
# kube-scheduler and kubectl from Go modules (cached per user in
# ~/.cache/mooring/kubebin; ~8 min cold) and prints their folder last.
kubebin:
	@hack/kubebin/build.sh

$(CONTROLLER_GEN): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(GO) build -o ../../$(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

generate: $(CONTROLLER_GEN)
	$(CONTROLLER_GEN) object paths=./api/... crd paths=./api/... output:crd:artifacts:config=config/crd
	@# One role per component and feature: every +kubebuilder:rbac marker
	@# names its role (roleName=mooring-<role>), and hack/rbac writes each to
	@# config/rbac/<role>/role.yaml; a marker without one is refused.
	{ $(CONTROLLER_GEN) rbac:roleName=mooring-agent paths=./internal/agent/... output:rbac:stdout && \
	  $(CONTROLLER_GEN) rbac:roleName=unnamed paths="{./internal/controller/...,./internal/podipamctl/...,./internal/bgpagent/...}" output:rbac:stdout; } | $(GO) run ./hack/rbac
	$(GO) run ./hack/chart

# verify fails when generated files, gofmt or go mod tidy are stale.
verify: generate
	@hack/verify.sh

vet:
	$(GO) vet ./...

# test is the README's test command: it installs and builds what the tests
# need, then runs vet, verify and every test (privileged ones included when
# run as root). `make image labimages` feed the real nodes (the chart runs
# from the image archive); Go's build cache keeps them incremental.
test: deps
	@MOORING_KUBEBIN=$$(hack/kubebin/build.sh | tail -n 1); export MOORING_KUBEBIN; \
	MOORING_HELM=$$(hack/helm/build.sh | tail -n 1); export MOORING_HELM; \
	echo "control-plane binaries: $$MOORING_KUBEBIN"; \
	MOORING_CNIPLUGINS=$$(hack/cniplugins/build.sh | tail -n 1); export MOORING_CNIPLUGINS; \
	MOORING_METALLB=$$(hack/metallb/build.sh | tail -n 1); export MOORING_METALLB; \
	MOORING_CONTAINERD=$$(hack/containerd/build.sh | tail -n 1); export MOORING_CONTAINERD; \
	$(MAKE) --no-print-directory image labimages >/dev/null; MOORING_IMAGES=$(CURDIR)/dist; export MOORING_IMAGES; \
	$(MAKE) --no-print-directory vet verify && \
	$(GO) test -count=1 -timeout 30m ./...

# demo is the README's first command: the one-machine lab, with Mooring
# installed from its Helm chart (`lab up --install=chart`: it builds helm,
# cached like the control plane). `make demo DEMO_INSTALL=` runs the
# controller and agents as lab processes instead (no helm needed).
DEMO_INSTALL ?= chart
demo: deps build
	@MOORING_KUBEBIN=$$(hack/kubebin/build.sh | tail -n 1); export MOORING_KUBEBIN; \
	if [ "$(DEMO_INSTALL)" = chart ]; then MOORING_HELM=$$(hack/helm/build.sh | tail -n 1); export MOORING_HELM; fi; \
	hack/demo.sh $(if $(DEMO_INSTALL),--install=$(DEMO_INSTALL))

bench:
	@MOORING_KUBEBIN=$$(hack/kubebin/build.sh | tail -n 1); export MOORING_KUBEBIN; \
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin tmp dist

# image builds the OCI image index (linux/amd64 + linux/arm64, from scratch,
# reproducible) into dist/oci and dist/mooring.oci.tar; prints the archive last.
image:
	@$(GO) run ./hack/image build --version $(VERSION) --out dist

# push builds the image (make image) and pushes its index, printing
# repository@digest: make push IMAGE=registry/repo:tag
push:
	@test -n "$(IMAGE)" || { echo "usage: make push IMAGE=registry/repo:tag" >&2; exit 1; }
	@$(MAKE) --no-print-directory image >/dev/null
	@$(GO) run ./hack/image push --layout dist/oci --image $(IMAGE)

# release makes a release from a clean commit into dist/: the image (make
# image, stamped VERSION), the chart package mooring-X.Y.Z.tgz (version
# X.Y.Z, appVersion VERSION, image pinned by digest), the plain manifests
# mooring-VERSION.yaml (config/, image pinned) and SHA256SUMS; prints the
# sums file last. The same commit and VERSION give the same bytes. It uses
# helm and kubectl from hack/helm and hack/kubebin (cached builds).
# IMAGE_REPO is where `make push` will put the image (the default is the
# chart's). Usage: make release VERSION=v0.2.0 [IMAGE_REPO=registry/repo]
IMAGE_REPO ?= ghcr.io/mooringlb/mooring
release:
	@case "$(origin VERSION)" in "command line"|environment) ;; *) echo "usage: make release VERSION=vX.Y.Z [IMAGE_REPO=registry/repo]" >&2; exit 2;; esac
	@$(GO) run ./hack/release --check --version "$(VERSION)"
	@$(MAKE) --no-print-directory image VERSION=$(VERSION) >/dev/null
	@HELM=$$(hack/helm/build.sh | tail -n 1)/helm; KUBECTL=$$(hack/kubebin/build.sh | tail -n 1)/kubectl; \
	$(GO) run ./hack/release --version "$(VERSION)" --out dist --image-repo "$(IMAGE_REPO)" --helm "$$HELM" --kubectl "$$KUBECTL"

# labimages builds the lab's echo and pause images (one static binary each,
# this machine's platform) into dist/echo.oci.tar and dist/pause.oci.tar:
# real nodes (lab up --runtime=containerd) import them with the Mooring
# image of `make image`, as no registry is reachable. Prints dist last.
labimages:
	@$(GO) run ./hack/image lab --version $(VERSION) --out dist

# containerd builds containerd, its runc shim and ctr from Go modules
# (cached per user in ~/.cache/mooring/containerd) for the lab's real nodes
# and prints their folder last.
containerd:
	@hack/containerd/build.sh

# helm builds helm from Go modules (cached) and prints its folder last.
helm:
	@hack/helm/build.sh

# metallb builds MetalLB's controller and speaker (go.universe.tf/metallb,
# pinned in hack/metallb/go.mod) with its CRDs, cached per user in
# ~/.cache/mooring/metallb, and prints their folder last. The lab runs them
# for the migration end-to-end tests.
.PHONY: metallb
metallb:
	@hack/metallb/build.sh
