package migrate

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// For the lab test, which must be an external test package (it imports
// internal/cli, which imports this package).
var InstallMetalLBPool = installMetalLBPool

// SetReader sets the client that computes who announces each address.
func (o *Options) SetReader(r client.Reader) { o.reader = r }
