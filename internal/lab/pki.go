package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is what the control plane needs to start: a CA, the apiserver's
// serving certificate signed by it, the service-account signing key and an
// admin token. Everything is ECDSA P-256 generated in Go: instant, and no
// openssl on the machine.
type pki struct {
	dir        string
	CACert     string // PEM file paths
	ServerCert string
	ServerKey  string
	SAKey      string
	SAPub      string
	TokenFile  string
	Token      string
	caPEM      []byte
	// caKey and caCert sign the real nodes' client certificates
	// (pki_nodes.go).
	caKey  *ecdsa.PrivateKey
	caCert *x509.Certificate
}

// lab identities: every component uses the one admin token (system:masters).
// A lab needs no least privilege, and one identity keeps kubeconfigs to two.
const adminUser = "mooring-lab-admin"

// newPKI writes the files into dir. sans are the apiserver's addresses.
func newPKI(dir string, sans []netip.Addr) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		dir:        dir,
		CACert:     filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "apiserver.crt"),
		ServerKey:  filepath.Join(dir, "apiserver.key"),
		SAKey:      filepath.Join(dir, "sa.key"),
		SAPub:      filepath.Join(dir, "sa.pub"),
		TokenFile:  filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mooring-lab-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("lab: creating CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "control-plane"},
	}
	for _, a := range sans {
		srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, net.IP(a.AsSlice()))
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("lab: creating apiserver certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p.Token = hex.EncodeToString(tok)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.caKey, p.caCert = caKey, caCert

	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path string
		data []byte
	}{
		{p.CACert, p.caPEM},
		{p.ServerCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})},
		{p.ServerKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER})},
		{p.SAKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER})},
		{p.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
		{p.TokenFile, fmt.Appendf(nil, "%s,%s,%s,\"system:masters\"\n", p.Token, adminUser, adminUser)},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// writeKubeconfig writes an admin kubeconfig for server (https URL) to path.
func (p *pki) writeKubeconfig(path, server string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["mooring-lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.caPEM}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{Token: p.Token}
	cfg.Contexts["mooring-lab"] = &clientcmdapi.Context{Cluster: "mooring-lab", AuthInfo: adminUser}
	cfg.CurrentContext = "mooring-lab"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("lab: writing kubeconfig %s: %w", path, err)
	}
	return nil
}
