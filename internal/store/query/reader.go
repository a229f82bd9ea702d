package query

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tidemark/tidemark/internal/store"
)

// ClickHouse server error codes the reader tells apart (ClickHouse's src/Common/ErrorCodes.cpp).
const (
	codeUnknownTable      = 60
	codeUnknownDatabase   = 81
	codeTimeoutExceeded   = 159
	codeUnknownUser       = 192
	codeWrongPassword     = 193
	codeRequiredPassword  = 194
	codeIPAddressNotAllow = 195
	codeAccessDenied      = 291 // 18.16: database access denied for the user
	codeNotEnoughPrivs    = 497 // >= 20.x: missing grant
	codeAuthFailed        = 516
)

// ErrBadInput marks a query the caller built wrong (an unknown stage, a level outside (0, 1), an empty time range):
// the user's mistake, not the database's or the reader's. Errors wrapping it name the bad value.
var ErrBadInput = errors.New("bad query input")

// ErrAuth marks a connection refused for the user name or password.
var ErrAuth = errors.New("clickhouse refused the user or password")

// ErrUnreachable marks a server that could not be reached (refused, timed out, DNS).
var ErrUnreachable = errors.New("clickhouse unreachable")

// ErrAccessDenied marks a logged-in user without the right to read Tidemark's database or tables.
var ErrAccessDenied = errors.New("clickhouse denied access")

// ErrTLS marks a TLS handshake that failed: the server's certificate was not trusted, the server refused the client's
// certificate, or one side does not speak TLS on that port.
var ErrTLS = errors.New("clickhouse TLS handshake failed")

// ErrTimeout marks a query the server stopped at max_execution_time.
var ErrTimeout = errors.New("clickhouse query timed out")

// Config says how to reach ClickHouse. It is the read side's subset of store.Config; the plugin fills it from its
// datasource settings.
type Config struct {
	Addr     []string    // host:port of the native protocol
	Database string      // Tidemark's database
	User     string      // default "default"
	Password string      // may be empty
	TLS      *tls.Config // nil: plaintext (ignored when DialContext is set)
	// DialContext, when set, makes every connection (e.g. store.Config.Dialer: TLS with certificate files re-read
	// when they rotate).
	DialContext func(ctx context.Context, addr string) (net.Conn, error)
	DialTimeout time.Duration
	// MaxExecutionTime bounds every query on the server (max_execution_time, whole seconds, at least 1 s):
	// cancelling a context does not stop a ClickHouse query, this does.
	MaxExecutionTime time.Duration
}

// Reader runs the read queries on one clickhouse-go connection pool. It is safe for concurrent use.
type Reader struct {
	conn driver.Conn
}

// Open connects to ClickHouse with cfg and pings it. A refused login wraps ErrAuth; an unreachable server wraps
// ErrUnreachable; a missing database wraps store.ErrSchemaMissing.
func Open(ctx context.Context, cfg Config) (*Reader, error) {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	secs := int(cfg.MaxExecutionTime / time.Second)
	if secs < 1 {
		secs = 30
	}
	user := cfg.User
	if user == "" {
		user = "default"
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         cfg.Addr,
		Auth:         clickhouse.Auth{Database: cfg.Database, Username: user, Password: cfg.Password},
		TLS:          cfg.TLS,
		DialContext:  cfg.DialContext,
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  time.Duration(secs+10) * time.Second,
		MaxOpenConns: 8,
		MaxIdleConns: 4,
		Settings:     clickhouse.Settings{"max_execution_time": secs},
	})
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %v: %w", cfg.Addr, classify(err))
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close()
		err = classify(err)
		if (cfg.TLS != nil || cfg.DialContext != nil) && hungUp(err) && !errors.Is(err, ErrTLS) {
			// With TLS on, a server that resets the handshake is refusing it (OpenSSL often resets instead of
			// alerting when a required client certificate is missing), not unreachable.
			err = fmt.Errorf("%w: the server closed the connection during the TLS handshake: %w", ErrTLS, err)
		}
		return nil, fmt.Errorf("connect to clickhouse %v database %s: %w", cfg.Addr, cfg.Database, err)
	}
	return &Reader{conn: conn}, nil
}

// NewReader wraps an open connection (tests, or a process that already holds one). Its queries are bounded by the
// connection's own max_execution_time setting.
func NewReader(conn driver.Conn) *Reader { return &Reader{conn: conn} }

// Close closes the connection pool.
func (r *Reader) Close() error { return r.conn.Close() }

// SchemaVersion returns the highest migration version recorded in schema_migrations. A database without Tidemark's
// schema returns an error wrapping store.ErrSchemaMissing.
func (r *Reader) SchemaVersion(ctx context.Context) (int, error) {
	var v uint32
	var n uint64
	row := r.conn.QueryRow(ctx, "SELECT max(version), count() FROM "+store.TableSchemaMigrations)
	if err := row.Scan(&v, &n); err != nil {
		return 0, fmt.Errorf("read schema version: %w", classify(err))
	}
	if n == 0 {
		return 0, fmt.Errorf("read schema version: no migration recorded: %w", store.ErrSchemaMissing)
	}
	return int(v), nil
}

// CheckSchema compares the database's schema version with store.CurrentSchemaVersion, the version these queries are
// written for: lower wraps store.ErrSchemaOutdated, higher store.ErrSchemaNewer. It returns the version found.
func (r *Reader) CheckSchema(ctx context.Context) (int, error) {
	v, err := r.SchemaVersion(ctx)
	if err != nil {
		return 0, err
	}
	return v, store.CheckSchemaVersion(v)
}

// ServerVersion returns the server's version string, e.g. "18.16.1".
func (r *Reader) ServerVersion(ctx context.Context) (string, error) {
	v, err := r.conn.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("read server version: %w", classify(err))
	}
	return fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch), nil
}

// classify wraps the errors callers tell apart (ErrAuth, ErrUnreachable, store.ErrSchemaMissing) and returns others
// unchanged; the original error stays in the chain for errors.As.
func classify(err error) error {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		switch ex.Code {
		case codeUnknownUser, codeWrongPassword, codeRequiredPassword, codeAuthFailed, codeIPAddressNotAllow:
			return fmt.Errorf("%w: %w", ErrAuth, err)
		case codeUnknownDatabase, codeUnknownTable:
			return fmt.Errorf("%w: %w", store.ErrSchemaMissing, err)
		case codeAccessDenied, codeNotEnoughPrivs:
			return fmt.Errorf("%w: %w", ErrAccessDenied, err)
		case codeTimeoutExceeded:
			return fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		return err
	}
	var (
		cve *tls.CertificateVerificationError
		rhe tls.RecordHeaderError
		oe  *net.OpError
	)
	if errors.As(err, &cve) || errors.As(err, &rhe) || errors.As(err, &oe) && oe.Op == "remote error" {
		return fmt.Errorf("%w: %w", ErrTLS, err)
	}
	var netErr interface{ Timeout() bool }
	if errors.As(err, &netErr) || isDialError(err) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}

// IsServerError reports whether err came from the ClickHouse server (an exception such as a timeout or memory limit)
// or the network, i.e. not from this process: the plugin reports such errors as downstream.
func IsServerError(err error) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrAuth) || errors.Is(err, ErrAccessDenied) ||
		errors.Is(err, ErrTLS) ||
		errors.Is(err, store.ErrSchemaMissing) || errors.Is(err, context.DeadlineExceeded)
}
