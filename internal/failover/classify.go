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
	"strings"
	"syscall"
)

// Class is what went wrong with one request, in the terms an operator can
// act on. There is deliberately no "000": curl's %{http_code} folds every
// transport failure into it and hid a TLS error from seed 000/001.
type Class string

// The classes, from the client's point of view.
const (
	ClassOK Class = "ok"
	// ClassConnectTimeout: no answer to the SYN in time — nobody owns the
	// address on the segment, or the owner is dead.
	ClassConnectTimeout Class = "connect-timeout"
	// ClassRefused: a host answered with RST — it is up, nothing listens.
	ClassRefused Class = "refused"
	// ClassReset: an established connection was reset (or the pipe broke).
	ClassReset Class = "reset"
	// ClassUnreachable: the kernel gave up resolving the neighbour
	// (EHOSTUNREACH) or has no route (ENETUNREACH).
	ClassUnreachable Class = "unreachable"
	// ClassTLS: TCP connected but the TLS handshake failed (curl exit 35).
	ClassTLS Class = "tls"
	// ClassResponseTimeout: connected, but no response within the timeout —
	// typically a connection forwarded to a dead backend.
	ClassResponseTimeout Class = "response-timeout"
	// ClassClosed: the peer closed the connection before a full response.
	ClassClosed Class = "closed"
	// ClassHTTPStatus: a response with status >= 400 (502/503 from a proxy
	// with no healthy backend); the code is in Outcome.Status.
	ClassHTTPStatus Class = "http-status"
	// ClassOther: anything else; Outcome.Detail says what.
	ClassOther Class = "other"
)

// Stage is how far a request got when it failed.
type Stage int

// The stages of one request.
const (
	StageConnect Stage = iota
	StageTLS
	StageRequest  // writing the request
	StageResponse // reading the response
)

func (s Stage) String() string {
	switch s {
	case StageConnect:
		return "connect"
	case StageTLS:
		return "tls"
	case StageRequest:
		return "request"
	case StageResponse:
		return "response"
	}
	return fmt.Sprintf("stage(%d)", int(s))
}

// Outcome is the classified result of one request.
type Outcome struct {
	Class  Class
	Status int    // HTTP status when a response was read, else 0
	Detail string // the error text, for the curious; empty when OK
}

// OK reports whether the request succeeded.
func (o Outcome) OK() bool { return o.Class == ClassOK }

// Answered reports whether the address answered: a success, or an HTTP
// response of any status — something behind the address spoke HTTP, even
// if only to say it has no healthy backend. It is what ends phase 1.
func (o Outcome) Answered() bool { return o.Class == ClassOK || o.Class == ClassHTTPStatus }

// Key is the counting key: the class, with the status folded in for HTTP
// errors ("http-503"), so 502s and 503s are counted apart.
func (o Outcome) Key() string {
	if o.Class == ClassHTTPStatus {
		return fmt.Sprintf("http-%d", o.Status)
	}
	return string(o.Class)
}

// Classify turns the error of a request that failed at stage into its
// Class. err must not be nil.
func Classify(stage Stage, err error) Class {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ECONNREFUSED:
			return ClassRefused
		case syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED:
			return ClassReset
		case syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN:
			return ClassUnreachable
		case syscall.ETIMEDOUT:
			return timeoutAt(stage)
		}
	}
	if isTLSError(err) {
		return ClassTLS
	}
	if isTimeout(err) {
		return timeoutAt(stage)
	}
	switch {
	case stage == StageTLS:
		// EOF or garbage in the handshake: TCP worked, TLS did not.
		return ClassTLS
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return ClassClosed
	}
	return ClassOther
}

func timeoutAt(stage Stage) Class {
	if stage == StageConnect {
		return ClassConnectTimeout
	}
	return ClassResponseTimeout
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isTLSError(err error) bool {
	var (
		rh   tls.RecordHeaderError
		al   tls.AlertError
		cv   *tls.CertificateVerificationError
		ua   x509.UnknownAuthorityError
		hn   x509.HostnameError
		ci   x509.CertificateInvalidError
		ech  *tls.ECHRejectionError
		prec = strings.Contains(err.Error(), "tls: ")
	)
	return prec || errors.As(err, &rh) || errors.As(err, &al) || errors.As(err, &cv) ||
		errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &ech)
}

// StatusOutcome classifies a response that was read in full.
func StatusOutcome(status int) Outcome {
	if status >= 400 {
		return Outcome{Class: ClassHTTPStatus, Status: status, Detail: fmt.Sprintf("HTTP %d", status)}
	}
	return Outcome{Class: ClassOK, Status: status}
}

// ErrorOutcome classifies a request that failed at stage with err.
func ErrorOutcome(stage Stage, err error) Outcome {
	return Outcome{Class: Classify(stage, err), Detail: stage.String() + ": " + err.Error()}
}
