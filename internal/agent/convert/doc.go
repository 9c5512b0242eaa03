// Package convert is the agent's one conversion layer: it turns the API
// objects the agent reads (Services, EndpointSlices, Nodes,
// L2AnnouncementPolicies) into the input of the pure decision core
// internal/announce. It is the only place that knows how Kubernetes spells
// what the core decides on; every room of the agent that needs a converted
// value (the decision loop, the compact store, the status reader, the
// announcement backends) calls it.
//
// It may import the API types (k8s.io/api, api/v1alpha1) and
// internal/announce; no clients, caches or I/O.
package convert
