//go:build !linux

package bfd

import "syscall"

func reuseAddr(syscall.RawConn) error { return nil }

func freeBind(syscall.RawConn, bool) error { return nil }
