//go:build !linux

package ipamd

import "errors"

func lockDir(string) (func() error, error) {
	return nil, errors.New("ipamd: the allocation store runs on Linux only")
}
