package bgpspeaker

import (
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// md5Control signs a dialer's socket with the TCP-MD5 password for peer
// (RFC 2385), as GoBGP does for its own sessions; nil without a password.
func md5Control(peer netip.Addr, password string) func(network, address string, c syscall.RawConn) error {
	if password == "" {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		sig := unix.TCPMD5Sig{Keylen: uint16(len(password))}
		copy(sig.Key[:], password)
		var serr error
		err := c.Control(func(fd uintptr) {
			// sockaddr_in / sockaddr_in6 laid out after the family.
			if peer.Is4() {
				sig.Addr.Family = unix.AF_INET
				b := peer.As4()
				copy(sig.Addr.Data[2:6], b[:])
			} else {
				sig.Addr.Family = unix.AF_INET6
				b := peer.As16()
				copy(sig.Addr.Data[6:22], b[:])
			}
			serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig)
		})
		if err != nil {
			return err
		}
		return serr
	}
}
