// Package ipam is the agent's hook into pod IPAM: it runs the node side
// (internal/podipamctl.RunNode: the allocator internal/ipamd and the CNI
// socket) inside the agent process when --pod-ipam-socket is set, and
// retries while the API server is unreachable so that an agent started
// then keeps announcing from its snapshot.
//
// It may import client-go's rest and errors and internal/podipamctl;
// nothing of the agent's other rooms.
package ipam
