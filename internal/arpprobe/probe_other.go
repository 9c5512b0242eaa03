//go:build !linux

package arpprobe

import "net"

// Listen reports ErrUnsupported: AF_PACKET sockets are Linux only.
func Listen(*net.Interface, Family) (net.PacketConn, error) { return nil, ErrUnsupported }

func drain(net.PacketConn, []byte, func([]byte)) {}
