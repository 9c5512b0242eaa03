package kube_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
)

// TestStaticMapperMatchesTheCRDs: every Mooring kind maps to the plural
// and scope its CRD declares (a wrong guess would send the agent's writes
// and watches to a resource that does not exist), and every CRD's kind is
// mapped.
func TestStaticMapperMatchesTheCRDs(t *testing.T) {
	m := kube.StaticMapper(kube.Scheme())
	files, err := filepath.Glob("../../config/crd/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs under config/crd: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		rm, err := m.RESTMapping(gk, mooringv1.GroupVersion.Version)
		if err != nil {
			t.Errorf("%s: %v", gk, err)
			continue
		}
		wantScope := meta.RESTScopeNameNamespace
		if crd.Spec.Scope == apiextensionsv1.ClusterScoped {
			wantScope = meta.RESTScopeNameRoot
		}
		if rm.Resource.Resource != crd.Spec.Names.Plural || rm.Scope.Name() != wantScope {
			t.Errorf("%s maps to %s (%s), its CRD says %s (%s)", gk, rm.Resource.Resource, rm.Scope.Name(), crd.Spec.Names.Plural, wantScope)
		}
	}
}

// TestStaticFirstClientNeedsNoDiscovery: a client on StaticFirstMapper
// reading a known kind from an API server that never answers returns when
// its context ends; discovery (which the default mapper runs first, with no
// deadline) is never asked. An unknown kind still goes to discovery.
func TestStaticFirstClientNeedsNoDiscovery(t *testing.T) {
	release := make(chan struct{})
	asked := make(chan string, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- r.URL.Path
		<-release // a stalled API server
	}))
	defer srv.Close()
	defer close(release)
	cfg := &rest.Config{Host: srv.URL}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := kube.StaticFirstMapper(kube.Scheme(), cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme(), HTTPClient: hc, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Get(ctx, client.ObjectKey{Name: "node-1"}, &mooringv1.L2Announcer{}) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get returned %v, want the context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get still blocked 10 s after its context ended: the client is waiting on discovery")
	}
	if p := <-asked; p != "/apis/mooring.dev/v1alpha1/l2announcers/node-1" {
		t.Fatalf("the client asked %s first, want the object itself", p)
	}
	go func() { _, _ = mapper.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "v1") }()
	select {
	case p := <-asked:
		if p != "/api" && p != "/apis" && p != "/apis/apps/v1" {
			t.Fatalf("an unknown kind asked %s, want discovery", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unknown kind mapped without asking the API server")
	}
}
