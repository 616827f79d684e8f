package embedded

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/campus-it/ucs/pkg/secretfile"
)

// Files of a FerretDB's credentials in FerretDBOptions.CredentialsDir: a certificate authority
// of its own, the server's certificate and key, and the one client certificate (with its key,
// as the MongoDB driver reads it) that the server accepts. Every file is 0600.
const (
	caFile         = "ca.pem"
	serverCertFile = "server.pem"
	serverKeyFile  = "server-key.pem"
	clientFile     = "client.pem"
)

// credentialsLife is how long generated certificates are valid: a data folder outlives many
// restarts, and the certificates leave the machine never.
const credentialsLife = 20 * 365 * 24 * time.Hour

// ensureCredentials generates the certificates in dir at first start (dir 0700, files 0600),
// and keeps them afterwards.
func ensureCredentials(dir string) error {
	if err := secretfile.PrivateDir(dir); err != nil {
		return fmt.Errorf("credentials folder: %w", err)
	}
	have := 0
	for _, f := range []string{caFile, serverCertFile, serverKeyFile, clientFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			have++
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if have == 4 {
		return secretfile.Restrict(dir)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "ucs embedded FerretDB CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(credentialsLife),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	issue := func(name string, usage x509.ExtKeyUsage) (cert, key []byte, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(credentialsLife),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
	}
	serverCert, serverKey, err := issue("ucs embedded FerretDB", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	clientCert, clientKey, err := issue("ucs", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{
		caFile:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		serverCertFile: serverCert,
		serverKeyFile:  serverKey,
		clientFile:     append(clientCert, clientKey...),
	} {
		if err := secretfile.Write(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// tlsURI is the MongoDB URI of a FerretDB at addr that takes the client certificate of dir.
func tlsURI(addr, dir string) string {
	q := url.Values{
		"tls":                   {"true"},
		"tlsCAFile":             {filepath.Join(dir, caFile)},
		"tlsCertificateKeyFile": {filepath.Join(dir, clientFile)},
	}
	return (&url.URL{Scheme: "mongodb", Host: addr, Path: "/", RawQuery: q.Encode()}).String()
}
