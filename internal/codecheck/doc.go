// Package codecheck holds tests that check the repository's own code
// against the house rules: the pure cores import nothing from Kubernetes
// or netlink (imports_test.go); no function under internal/ is longer than
// 80 lines but the few listed, each with why (funclen_test.go). It has no code of its own; it reads the
// source tree (go/parser) and asks the go command for import graphs.
//
// A package declares itself a pure core with the directive
//
//	//mooring:pure
//
// in its package doc comment (doc.go): from then on it, and everything it
// imports, must not import k8s.io/..., sigs.k8s.io/... or netlink. The
// first pure cores (ipalloc, lbipam, announce, podipam) must keep the
// directive; a new core (internal/bgp) joins by adding it.
package codecheck
