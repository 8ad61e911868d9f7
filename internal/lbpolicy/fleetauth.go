package lbpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// The credentials of the policy's etcd client come from Envoy's
// environment, naming files where they are secrets' contents, never from
// the policy's configuration (which Envoy's admin interface shows):
// docs/persistence.md, "etcd authentication and TLS with the policy".
const (
	// EnvEtcdUser and EnvEtcdPassword are etcd's user and password (the
	// filter's variables); EnvEtcdPasswordFile names a file holding the
	// password instead (a mounted Secret), its trailing newline dropped.
	EnvEtcdUser         = "HASHLB_ETCD_USER"
	EnvEtcdPassword     = "HASHLB_ETCD_PASSWORD"
	EnvEtcdPasswordFile = "HASHLB_ETCD_PASSWORD_FILE"
	// EnvEtcdCAFile names the PEM CA bundle that etcd's server certificate
	// must chain to; set, the client speaks TLS.
	EnvEtcdCAFile = "HASHLB_ETCD_CA_FILE"
	// EnvEtcdCertFile and EnvEtcdKeyFile name the client certificate and
	// its key (PEM) for etcd's --client-cert-auth.
	EnvEtcdCertFile = "HASHLB_ETCD_CERT_FILE"
	EnvEtcdKeyFile  = "HASHLB_ETCD_KEY_FILE"
	// EnvEtcdServerName is the name etcd's certificate must carry; unset,
	// the endpoint's host.
	EnvEtcdServerName = "HASHLB_ETCD_SERVER_NAME"
)

// etcdCredentials are what the fleet's client authenticates with: a user
// and password (token auth) and a TLS configuration (nil: plain TCP).
type etcdCredentials struct {
	user, password string
	tls            *tls.Config
}

// LoadEtcdCredentials reads the etcd client's credentials for a policy with
// persistence.fleet from getenv (os.Getenv in Envoy) and the files it
// names. A partial or unreadable set is an error naming the variable and
// the file, never a secret; without persistence.fleet it reads nothing.
func (p *Policy) LoadEtcdCredentials(getenv func(string) string) error {
	if p.Config.Persistence == nil || p.Config.Persistence.Fleet == nil {
		return nil
	}
	c, err := loadEtcdCredentials(getenv)
	if err != nil {
		return fmt.Errorf("persistence.fleet: %w", err)
	}
	p.etcd = c
	return nil
}

func loadEtcdCredentials(getenv func(string) string) (etcdCredentials, error) {
	var c etcdCredentials
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	c.user = getenv(EnvEtcdUser)
	pw, pwFile := getenv(EnvEtcdPassword), getenv(EnvEtcdPasswordFile)
	switch {
	case pw != "" && pwFile != "":
		bad("%s and %s are both set: set one", EnvEtcdPassword, EnvEtcdPasswordFile)
	case pwFile != "":
		b, err := os.ReadFile(pwFile)
		if err != nil {
			bad("%s: %v", EnvEtcdPasswordFile, err)
		}
		pw = strings.TrimRight(string(b), "\r\n")
		if err == nil && pw == "" {
			bad("%s: %s is empty", EnvEtcdPasswordFile, pwFile)
		}
	}
	c.password = pw
	switch {
	case c.user != "" && pw == "" && pwFile == "":
		bad("%s is set without a password: set %s or %s", EnvEtcdUser, EnvEtcdPassword, EnvEtcdPasswordFile)
	case c.user == "" && (pw != "" || pwFile != ""):
		bad("a password is set without %s", EnvEtcdUser)
	}
	ca, cert, key := getenv(EnvEtcdCAFile), getenv(EnvEtcdCertFile), getenv(EnvEtcdKeyFile)
	if (cert == "") != (key == "") {
		bad("%s and %s go together: set both or neither", EnvEtcdCertFile, EnvEtcdKeyFile)
	}
	if ca != "" || cert != "" {
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: getenv(EnvEtcdServerName)}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				bad("%s: %v", EnvEtcdCAFile, err)
			} else {
				c.tls.RootCAs = x509.NewCertPool()
				if !c.tls.RootCAs.AppendCertsFromPEM(pem) {
					bad("%s: %s holds no PEM certificate", EnvEtcdCAFile, ca)
				}
			}
		}
		if cert != "" && key != "" {
			kp, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				bad("%s, %s: %v", EnvEtcdCertFile, EnvEtcdKeyFile, err)
			} else {
				c.tls.Certificates = []tls.Certificate{kp}
			}
		}
	}
	if len(errs) > 0 {
		return etcdCredentials{}, errors.Join(errs...)
	}
	return c, nil
}
