// Package v1alpha1 holds Mooring's custom resources: LoadBalancerIPPool and
// L2AnnouncementPolicy (group mooring.dev, cluster-scoped).
//
// It imports only k8s.io/apimachinery, so any client can import it cheaply;
// the pure cores never import it.
//
// +kubebuilder:object:generate=true
// +groupName=mooring.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "mooring.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&LoadBalancerIPPool{}, &LoadBalancerIPPoolList{},
		&L2AnnouncementPolicy{}, &L2AnnouncementPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
