package plugin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
)

// userError is a problem the user fixes (settings, the query, the database): reported as downstream.
type userError struct {
	status backend.Status
	msg    string
	err    error // cause, may be nil
}

func (e *userError) Error() string { return e.msg }
func (e *userError) Unwrap() error { return e.err }

func badRequest(err error) error {
	return &userError{status: backend.StatusBadRequest, msg: err.Error(), err: err}
}

// explain turns an error from connecting or querying into a message in Grafana's terms and says whose it is:
// the user's or the database's (downstream) or this plugin's. s names the datasource's address and database.
func explain(err error, s Settings) (backend.Status, backend.ErrorSource, string) {
	var ue *userError
	switch {
	case errors.As(err, &ue):
		return ue.status, backend.ErrorSourceDownstream, ue.msg
	case errors.Is(err, query.ErrBadInput):
		return backend.StatusBadRequest, backend.ErrorSourceDownstream, trimSentinel(err.Error(), query.ErrBadInput)
	case errors.Is(err, query.ErrAuth):
		// Not 401: Grafana's frontend takes a 401 from its API as the user's own session expiring.
		return backend.StatusBadRequest, backend.ErrorSourceDownstream, fmt.Sprintf(
			"ClickHouse at %s refused user %q: check the user and password in the datasource settings", s.Address, s.Username)
	case errors.Is(err, query.ErrTLS):
		var cve *tls.CertificateVerificationError
		if errors.As(err, &cve) {
			return backend.StatusBadGateway, backend.ErrorSourceDownstream, fmt.Sprintf(
				"ClickHouse at %s presented a certificate this datasource does not trust (%s): set the CA certificate "+
					"that signed it, or the Server name the certificate carries", s.Address, rootCause(err))
		}
		var rhe tls.RecordHeaderError
		if errors.As(err, &rhe) {
			return backend.StatusBadGateway, backend.ErrorSourceDownstream, fmt.Sprintf(
				"ClickHouse at %s did not answer TLS (%s): is the address the secure native port (usually 9440)?", s.Address, rootCause(err))
		}
		return backend.StatusBadGateway, backend.ErrorSourceDownstream, fmt.Sprintf(
			"ClickHouse at %s refused the TLS handshake (%s): it may want a client certificate signed by a CA it trusts "+
				"(Client certificate and Client key), or the address is not its secure native port (usually 9440)", s.Address, rootCause(err))
	case errors.Is(err, query.ErrUnreachable):
		return backend.StatusBadGateway, backend.ErrorSourceDownstream, fmt.Sprintf(
			"cannot reach ClickHouse at %s (%s): check the address (native protocol port, usually 9000, or 9440 with TLS) "+
				"and that the server is running", s.Address, rootCause(err))
	case errors.Is(err, query.ErrAccessDenied):
		return backend.StatusForbidden, backend.ErrorSourceDownstream, fmt.Sprintf(
			"ClickHouse user %q may not read database %q: grant it SELECT on the database (%s)", s.Username, s.Database, rootCause(err))
	case errors.Is(err, store.ErrSchemaMissing):
		return backend.StatusBadRequest, backend.ErrorSourceDownstream, fmt.Sprintf(
			"database %q on %s has no Tidemark schema: run `tidemark migrate` against it, or correct the Database setting",
			s.Database, s.Address)
	case errors.Is(err, store.ErrSchemaOutdated):
		return backend.StatusBadRequest, backend.ErrorSourceDownstream, fmt.Sprintf(
			"database %q was migrated by an older Tidemark (%s): run `tidemark migrate` to upgrade it",
			s.Database, schemaDetail(err))
	case errors.Is(err, store.ErrSchemaNewer):
		return backend.StatusBadRequest, backend.ErrorSourceDownstream, fmt.Sprintf(
			"database %q was migrated by a newer Tidemark (%s): upgrade this plugin", s.Database, schemaDetail(err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, query.ErrTimeout):
		return backend.StatusTimeout, backend.ErrorSourceDownstream, fmt.Sprintf(
			"the query ran longer than the datasource's query timeout (%s): narrow the time range or the filters, or raise "+
				"the timeout", s.QueryTimeout)
	case errors.Is(err, context.Canceled):
		return backend.StatusBadRequest, backend.ErrorSourceDownstream, "the query was cancelled"
	case query.IsServerError(err):
		return backend.StatusBadGateway, backend.ErrorSourceDownstream, "ClickHouse answered with an error: " + rootCause(err)
	}
	return backend.StatusInternal, backend.ErrorSourcePlugin, "Tidemark plugin error: " + err.Error()
}

// errorResponse is explain as a DataResponse.
func errorResponse(err error, s Settings) backend.DataResponse {
	status, src, msg := explain(err, s)
	return backend.ErrDataResponseWithSource(status, src, msg)
}

func trimSentinel(msg string, sentinel error) string {
	return strings.TrimSuffix(msg, ": "+sentinel.Error())
}

// schemaDetail is the "schema version N, want M" part of a schema error.
func schemaDetail(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "schema version"); i >= 0 {
		msg = msg[i:]
	}
	if i := strings.Index(msg, ": tidemark schema"); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// rootCause is the innermost error's text: the part a user can act on (e.g. "connection refused").
func rootCause(err error) string {
	for {
		var next error
		if u, ok := err.(interface{ Unwrap() []error }); ok {
			errs := u.Unwrap()
			next = errs[len(errs)-1]
		} else {
			next = errors.Unwrap(err)
		}
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
