// Package v1alpha1 holds Mooring's custom resources: LoadBalancerIPPool and
// L2AnnouncementPolicy (group mooring.dev, cluster-scoped).
//
// It may import only k8s.io/apimachinery and sigs.k8s.io/controller-runtime's
// scheme helpers; the pure cores never import it.
//
// +kubebuilder:object:generate=true
// +groupName=mooring.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "mooring.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
