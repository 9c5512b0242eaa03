package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// prober runs one container's readiness probe as the kubelet does: not
// ready until the first success, then successThreshold successes or
// failureThreshold failures in a row flip it, every periodSeconds.
type prober struct {
	probe *corev1.Probe
	c     *corev1.Container
	addr  netip.Addr // the pod's IP (the node's for hostNetwork pods)
}

// probeTimings are the probe's settings with Kubernetes' defaults.
func probeTimings(p *corev1.Probe) (delay, period, timeout time.Duration, success, failure int) {
	delay = time.Duration(p.InitialDelaySeconds) * time.Second
	period, timeout = 10*time.Second, time.Second
	if p.PeriodSeconds > 0 {
		period = time.Duration(p.PeriodSeconds) * time.Second
	}
	if p.TimeoutSeconds > 0 {
		timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	success, failure = 1, 3
	if p.SuccessThreshold > 0 {
		success = int(p.SuccessThreshold)
	}
	if p.FailureThreshold > 0 {
		failure = int(p.FailureThreshold)
	}
	return delay, period, timeout, success, failure
}

// containerPort resolves a probe's port: a number, or a named port of c.
func containerPort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no container port named %q", port.StrVal)
}

// check runs the probe once.
func (pr *prober) check(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case pr.probe.HTTPGet != nil:
		g := pr.probe.HTTPGet
		port, err := containerPort(pr.c, g.Port)
		if err != nil {
			return err
		}
		host := pr.addr.String()
		if g.Host != "" {
			host = g.Host
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+g.Path, nil)
		if err != nil {
			return err
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		req.Header.Set("User-Agent", "kube-probe/"+Version)
		tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // as the kubelet's probes
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return nil
	case pr.probe.TCPSocket != nil:
		port, err := containerPort(pr.c, pr.probe.TCPSocket.Port)
		if err != nil {
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(pr.addr.String(), strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return errUnsupportedProbe
}

var errUnsupportedProbe = fmt.Errorf("only httpGet and tcpSocket probes are supported by the lab's kubelet")

// run probes until done closes or ctx ends, calling set on every change
// of readiness (starting from not ready).
func (pr *prober) run(ctx context.Context, done <-chan struct{}, set func(ready bool, why string)) {
	delay, period, timeout, success, failure := probeTimings(pr.probe)
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-done:
			return false
		case <-t.C:
			return true
		}
	}
	if !wait(delay) {
		return
	}
	ready, ok, bad := false, 0, 0
	for {
		err := pr.check(ctx, timeout)
		if err == errUnsupportedProbe {
			set(true, err.Error())
			return
		}
		if err == nil {
			ok, bad = ok+1, 0
			if !ready && ok >= success {
				ready = true
				set(true, "")
			}
		} else {
			ok, bad = 0, bad+1
			if ready && bad >= failure {
				ready = false
				set(false, err.Error())
			}
		}
		if !wait(period) {
			return
		}
	}
}
