package deploy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"slices"
)

// etcdTLSUsers are the etcd users whose certificates the deployments hand
// out, by the conch command that authenticates as each: the services as
// themselves, etcd-auth as root.
var etcdTLSUsers = map[string]string{
	"router": "router", "executor": "executor", "approval": "approval", "workspace": "workspace",
	"etcd-auth": "root",
}

// etcdCert checks a certificate and key as etcd would take them: the key
// is the certificate's, the CA signed it, and it is user's (its common
// name) or, with hosts, a member's valid for each of them.
func etcdCert(caPEM, certPEM, keyPEM []byte, user string, hosts ...string) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("certificate and key: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	blk, _ := pem.Decode(caPEM)
	if blk == nil {
		return fmt.Errorf("CA is not PEM")
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("not signed by the CA: %w", err)
	}
	if len(hosts) == 0 && cert.Subject.CommonName != user {
		return fmt.Errorf("certificate of etcd user %q, want %q", cert.Subject.CommonName, user)
	}
	for _, h := range hosts {
		if err := cert.VerifyHostname(h); err != nil {
			return fmt.Errorf("member certificate: %w", err)
		}
	}
	return nil
}

// etcdUsersSeen checks that every user of etcdTLSUsers got its
// certificate somewhere.
func etcdUsersSeen(seen map[string]bool) error {
	want := slices.Sorted(maps.Keys(etcdTLSUsers))
	got := slices.Sorted(maps.Keys(seen))
	if !slices.Equal(want, got) {
		return fmt.Errorf("commands with their etcd certificate: %v, want %v", got, want)
	}
	return nil
}
