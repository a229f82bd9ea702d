package store

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/tlsconf"
	"github.com/tidemark/tidemark/internal/tlsconf/tlstest"
)

// TestSecurePort reaches ClickHouse's secure native port (stack.sh up --secure: a server certificate from the local
// CA, client certificates required) with the CA, a client certificate and a password file, and migrates through
// it; without the client certificate, or trusting another CA, the connection is refused with a TLS error.
func TestSecurePort(t *testing.T) {
	s := testenv.SecureStack(t)
	db, _ := testenv.ClickHouseDB(t)
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(testenv.SecureClickHousePW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := s.ClientCert()
	good := Config{Addr: []string{s.ClickHouseSecureAddr}, Database: db, User: "tidemark", PasswordFile: pw,
		TLS: tlsconf.Config{Enabled: true, CAFile: s.CA(), CertFile: cert, KeyFile: key}}
	st, err := Open(testCtx(t), good)
	if err != nil {
		t.Fatalf("open over TLS: %v", err)
	}
	res, err := st.Migrate(testCtx(t))
	if err != nil || res.To != CurrentSchemaVersion {
		t.Fatalf("migrate over TLS: %+v %v", res, err)
	}
	_ = st.Close()

	noCert := good
	noCert.TLS.CertFile, noCert.TLS.KeyFile = "", ""
	if st, err := Open(testCtx(t), noCert); err == nil {
		_ = st.Close()
		t.Fatal("the secure port accepted a client without a certificate")
	} else if !strings.Contains(err.Error(), "tls") && !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("without a client certificate: %v, want a TLS failure", err)
	}

	other := filepath.Join(dir, "other-ca.pem")
	if err := os.WriteFile(other, tlstest.NewCA(t, "other").PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	wrongCA := good
	wrongCA.TLS.CAFile = other
	_, err = Open(testCtx(t), wrongCA)
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) || !strings.Contains(err.Error(), s.ClickHouseSecureAddr) {
		t.Fatalf("trusting another CA: %v, want an unknown-authority error naming %s", err, s.ClickHouseSecureAddr)
	}

	wrongPW := good
	wrongPW.PasswordFile = ""
	wrongPW.Password = "wrong-password-123"
	_, err = Open(testCtx(t), wrongPW)
	if err == nil || strings.Contains(err.Error(), "wrong-password-123") {
		t.Fatalf("wrong password: %v (must fail, and not echo the password)", err)
	}
}
