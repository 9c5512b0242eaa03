package kube

import (
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// StaticMapper maps the kinds Mooring's agents read and write without
// asking the API server: the built-in ones they use and all of Mooring's
// (cluster-scoped). The default mapper discovers a kind on first use,
// which fails while the API server is unreachable, and controller-runtime's
// client does that discovery under a lock every other request through the
// client waits on, with no deadline: one status write during an API outage
// held up the agent's other writers and its exit on SIGTERM.
func StaticMapper(scheme *runtime.Scheme) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Service"),
		corev1.SchemeGroupVersion.WithKind("Event"),
		corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		corev1.SchemeGroupVersion.WithKind("Pod"),
		corev1.SchemeGroupVersion.WithKind("Secret"),
		discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"),
		eventsv1.SchemeGroupVersion.WithKind("Event"),
	} {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	m.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	for gvk := range scheme.AllKnownTypes() {
		if gvk.GroupVersion() == mooringv1.GroupVersion && !strings.HasSuffix(gvk.Kind, "List") {
			m.Add(gvk, meta.RESTScopeRoot)
		}
	}
	return m
}

// StaticFirstMapper is StaticMapper, then discovery (through hc) for any
// other kind.
func StaticFirstMapper(scheme *runtime.Scheme, cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	dyn, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	return meta.FirstHitRESTMapper{MultiRESTMapper: meta.MultiRESTMapper{StaticMapper(scheme), dyn}}, nil
}
