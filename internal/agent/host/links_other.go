//go:build !linux

package host

func (Links) Inspect() ([]LinkInfo, error) { return nil, errUnsupported }
