package failover

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

func opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, err)}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name  string
		stage Stage
		err   error
		want  Class
	}{
		{"refused", StageConnect, opErr("connect", syscall.ECONNREFUSED), ClassRefused},
		{"reset on read", StageResponse, opErr("read", syscall.ECONNRESET), ClassReset},
		{"broken pipe on write", StageRequest, opErr("write", syscall.EPIPE), ClassReset},
		{"no route to host", StageConnect, opErr("connect", syscall.EHOSTUNREACH), ClassUnreachable},
		{"network unreachable", StageConnect, opErr("connect", syscall.ENETUNREACH), ClassUnreachable},
		{"kernel SYN timeout", StageConnect, opErr("connect", syscall.ETIMEDOUT), ClassConnectTimeout},
		{"dial deadline", StageConnect, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, ClassConnectTimeout},
		{"dial context deadline", StageConnect, fmt.Errorf("dial: %w", context.DeadlineExceeded), ClassConnectTimeout},
		{"read deadline", StageResponse, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, ClassResponseTimeout},
		{"handshake timeout", StageTLS, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, ClassResponseTimeout},
		{"record header", StageTLS, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, ClassTLS},
		{"alert", StageTLS, &net.OpError{Op: "remote error", Err: tls.AlertError(40)}, ClassTLS},
		{"unknown authority", StageTLS, &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, ClassTLS},
		{"hostname", StageTLS, x509.HostnameError{Host: "x", Certificate: &x509.Certificate{}}, ClassTLS},
		{"tls text", StageResponse, errors.New("tls: bad record MAC"), ClassTLS},
		{"eof in handshake", StageTLS, io.EOF, ClassTLS},
		{"reset in handshake", StageTLS, opErr("read", syscall.ECONNRESET), ClassReset},
		{"eof before response", StageResponse, io.ErrUnexpectedEOF, ClassClosed},
		{"plain eof", StageResponse, fmt.Errorf("malformed: %w", io.EOF), ClassClosed},
		{"other", StageResponse, errors.New("malformed HTTP response"), ClassOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.stage, tt.err); got != tt.want {
				t.Errorf("Classify(%v, %v) = %s, want %s", tt.stage, tt.err, got, tt.want)
			}
		})
	}
}

func TestStatusOutcome(t *testing.T) {
	tests := []struct {
		status int
		ok     bool
		key    string
	}{
		{200, true, "ok"}, {204, true, "ok"}, {302, true, "ok"},
		{404, false, "http-404"}, {502, false, "http-502"}, {503, false, "http-503"},
	}
	for _, tt := range tests {
		o := StatusOutcome(tt.status)
		if o.OK() != tt.ok || o.Key() != tt.key {
			t.Errorf("StatusOutcome(%d) = %+v (key %s), want ok=%v key=%s", tt.status, o, o.Key(), tt.ok, tt.key)
		}
	}
}

func TestErrorOutcomeNeverBare000(t *testing.T) {
	o := ErrorOutcome(StageConnect, opErr("connect", syscall.ECONNREFUSED))
	if o.Key() != "refused" || o.Detail == "" || o.Status != 0 {
		t.Errorf("ErrorOutcome = %+v", o)
	}
}
