package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Client certificates for real nodes: each kubelet is system:node:<name>
// in system:nodes (what the Node authorizer and NodeRestriction expect),
// and the apiserver reaches the kubelets as a system:masters client.

func (p *pki) kubeletClientCert() string { return filepath.Join(p.dir, "apiserver-kubelet-client.crt") }
func (p *pki) kubeletClientKey() string  { return filepath.Join(p.dir, "apiserver-kubelet-client.key") }

// writeKubeletClient writes the apiserver's client certificate for the
// kubelets.
func (p *pki) writeKubeletClient() error {
	return p.clientCert("kube-apiserver-kubelet-client", []string{"system:masters"}, p.kubeletClientCert(), p.kubeletClientKey())
}

// clientCert issues a client certificate for cn in orgs.
func (p *pki) clientCert(cn string, orgs []string, certPath, keyPath string) error {
	if p.caKey == nil {
		return fmt.Errorf("lab: no CA key to sign %s's certificate", cn)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("lab: certificate for %s: %w", cn, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// writeNodeKubeconfig writes node's kubeconfig (its own client
// certificate, for server) to path.
func (p *pki) writeNodeKubeconfig(path, server, node string) error {
	cert, key := path+".crt", path+".key"
	if err := p.clientCert("system:node:"+node, []string{"system:nodes"}, cert, key); err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["mooring-lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.caPEM}
	cfg.AuthInfos[node] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	cfg.Contexts["mooring-lab"] = &clientcmdapi.Context{Cluster: "mooring-lab", AuthInfo: node}
	cfg.CurrentContext = "mooring-lab"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("lab: writing %s's kubeconfig: %w", node, err)
	}
	return nil
}
