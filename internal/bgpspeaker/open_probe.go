package bgpspeaker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// When a router answers this node's OPEN with a NOTIFICATION, GoBGP reports
// only "invalid message in OpenSent" (it keeps the NOTIFICATION's code to
// itself). To say *why* the router refused — most often the AS — the
// backend opens one connection of its own, sends the same OPEN and reads
// the router's answer. It does so at most once per probeEvery per peer,
// and only while the session is failing that way.

// openRefusal is the NOTIFICATION a router answered an OPEN with.
type openRefusal struct {
	code, subcode uint8
}

// asTrans stands in for a 4-byte AS in the OPEN's 2-byte field (RFC 6793).
const asTrans = 23456

// probeOpen sends an OPEN like the session's and returns the router's
// NOTIFICATION; ok is false when the router accepted it (answered OPEN)
// or could not be asked. Cost: one connection, two messages, ≤ ctx.
func probeOpen(ctx context.Context, p PeerConfig, routerID netip.Addr) (openRefusal, bool) {
	d := net.Dialer{Control: md5Control(p.Address, p.Password)}
	if p.SourceAddress.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: p.SourceAddress.AsSlice()}
	}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Address.String(), strconv.Itoa(int(p.Port))))
	if err != nil {
		return openRefusal{}, false
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	msg, err := openMessage(p, routerID)
	if err != nil {
		return openRefusal{}, false
	}
	if _, err := conn.Write(msg); err != nil {
		return openRefusal{}, false
	}
	for range 3 { // an OPEN may come before the NOTIFICATION
		typ, body, err := readMessage(conn)
		if err != nil {
			return openRefusal{}, false
		}
		if typ == bgp.BGP_MSG_NOTIFICATION && len(body) >= 2 {
			return openRefusal{code: body[0], subcode: body[1]}, true
		}
	}
	return openRefusal{}, false
}

func openMessage(p PeerConfig, routerID netip.Addr) ([]byte, error) {
	caps := []bgp.ParameterCapabilityInterface{bgp.NewCapRouteRefresh(), bgp.NewCapFourOctetASNumber(p.LocalASN)}
	for _, f := range p.Families {
		rf := bgp.RF_IPv4_UC
		if f == 6 {
			rf = bgp.RF_IPv6_UC
		}
		caps = append(caps, bgp.NewCapMultiProtocol(rf))
	}
	as := uint16(asTrans)
	if p.LocalASN <= 0xffff {
		as = uint16(p.LocalASN)
	}
	m, err := bgp.NewBGPOpenMessage(as, uint16(p.HoldTime/time.Second), routerID,
		[]bgp.OptionParameterInterface{bgp.NewOptionParameterCapability(caps)})
	if err != nil {
		return nil, err
	}
	return m.Serialize()
}

// readMessage reads one BGP message: its type and body.
func readMessage(r io.Reader) (uint8, []byte, error) {
	var hdr [bgp.BGP_HEADER_LENGTH]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[16:18]))
	if n < bgp.BGP_HEADER_LENGTH || n > 65535 {
		return 0, nil, errors.New("bad BGP length")
	}
	body := make([]byte, n-bgp.BGP_HEADER_LENGTH)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return hdr[18], body, nil
}

// describe names the refusal and what to change.
func (o openRefusal) describe(p PeerConfig) (reason, message string) {
	text := bgp.NewNotificationErrorCode(o.code, o.subcode).String()
	switch {
	case o.code == bgp.BGP_ERROR_OPEN_MESSAGE_ERROR && o.subcode == bgp.BGP_ERROR_SUB_BAD_PEER_AS:
		return ReasonPeerASMismatch, fmt.Sprintf("the router %s refused this node's AS %d (%s): set myASN to the AS the router expects, or fix the router's neighbor remote-as", p.Address, p.LocalASN, text)
	case o.code == bgp.BGP_ERROR_OPEN_MESSAGE_ERROR:
		return ReasonOpenMessageError, fmt.Sprintf("the router %s refused this node's OPEN (%s): compare router ID, hold time and address families with its configuration", p.Address, text)
	}
	return ReasonNotificationReceived, fmt.Sprintf("the router %s refused the session: %s", p.Address, text)
}
