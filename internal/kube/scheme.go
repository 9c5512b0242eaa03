// Package kube holds the small pieces every Kubernetes adapter of Mooring
// shares: the scheme, client construction and the slog bridge. Pure cores
// never import it.
package kube

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// Scheme returns a new scheme with the built-in types and Mooring's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(mooringv1.AddToScheme(s))
	return s
}
