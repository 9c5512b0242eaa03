//go:build !linux

package agent

func (netlinkLinks) Inspect() ([]LinkInfo, error) { return nil, errUnsupported }
