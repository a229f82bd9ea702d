package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// TestParseApplied covers what schema_migrations may hold: rows Tidemark wrote, and rows it never writes.
func TestParseApplied(t *testing.T) {
	ms, err := Migrations(goldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	row := func(v uint32, name, dialect, sum string) appliedMigration {
		return appliedMigration{Version: v, Name: name, Dialect: dialect, Checksum: sum}
	}
	m1, m2 := ms[0], ms[1]
	for _, tc := range []struct {
		name    string
		rows    []appliedMigration
		version int
		dialect Dialect
		err     error  // nil: accepted
		msg     string // part of the error's text naming the row
	}{
		{name: "fresh database", rows: nil, version: 0, dialect: ""},
		{name: "first migration", rows: []appliedMigration{row(1, m1.Name, "legacy", m1.Checksum)}, version: 1, dialect: DialectLegacy},
		{name: "current", rows: []appliedMigration{row(1, m1.Name, "legacy", m1.Checksum), row(2, m2.Name, "legacy", m2.Checksum)},
			version: 2, dialect: DialectLegacy},
		// two migrates racing may both record a version (docs/schema.md): harmless
		{name: "version recorded twice", rows: []appliedMigration{row(1, m1.Name, "legacy", m1.Checksum), row(1, m1.Name, "legacy", m1.Checksum)},
			version: 1, dialect: DialectLegacy},
		// the panic of migrate.go:67: ms[v-1] with v = 0
		{name: "version 0", rows: []appliedMigration{row(0, "0000_x", "legacy", "")}, err: ErrMigrationTable, msg: "version 0"},
		{name: "version 0 after good rows", rows: []appliedMigration{row(0, "", "legacy", ""), row(1, m1.Name, "legacy", m1.Checksum)},
			err: ErrMigrationTable, msg: "version 0"},
		{name: "unknown dialect", rows: []appliedMigration{row(1, m1.Name, "auto", m1.Checksum)}, err: ErrMigrationTable, msg: `dialect "auto"`},
		{name: "empty dialect", rows: []appliedMigration{row(1, m1.Name, "", m1.Checksum)}, err: ErrMigrationTable, msg: `dialect ""`},
		{name: "mixed dialects", rows: []appliedMigration{row(1, m1.Name, "legacy", m1.Checksum), row(2, m2.Name, "modern", "")},
			err: ErrMigrationTable, msg: "mixes dialects legacy and modern"},
		{name: "edited migration", rows: []appliedMigration{row(1, m1.Name, "legacy", "0000")}, err: ErrChecksumMismatch, msg: "0001_init"},
		// a version's name is fixed once released: another name under it is another migration
		{name: "renamed migration", rows: []appliedMigration{row(1, "0001_other", "legacy", m1.Checksum)}, err: ErrChecksumMismatch,
			msg: `"0001_other"`},
		{name: "newer build", rows: []appliedMigration{row(1, m1.Name, "legacy", m1.Checksum), row(uint32(len(ms)+1), "9999_future", "legacy", "")},
			err: ErrSchemaNewer, msg: fmt.Sprintf("at schema version %d,", len(ms)+1)},
		// the largest UInt32 must not overflow anything
		{name: "max uint32", rows: []appliedMigration{row(^uint32(0), "x", "modern", "")}, err: ErrSchemaNewer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseApplied(tc.rows)
			if err == nil {
				err = st.verify(ms, "db")
			}
			if tc.err == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if st.version != tc.version || st.dialect != tc.dialect {
					t.Fatalf("version %d dialect %q, want %d %q", st.version, st.dialect, tc.version, tc.dialect)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want %v mentioning %q", err, tc.err, tc.msg)
			}
		})
	}
}

// FuzzParseApplied: whatever two rows schema_migrations holds, parsing never panics, and an accepted state is
// consistent: versions >= 1, one known dialect, version = the largest recorded, within what this build knows.
func FuzzParseApplied(f *testing.F) {
	ms, err := Migrations(goldenParams(DialectLegacy))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint32(1), ms[0].Name, "legacy", ms[0].Checksum, uint32(2), ms[1].Name, "legacy", ms[1].Checksum)
	f.Add(uint32(0), "", "legacy", "", uint32(1), "0001_init", "modern", "")
	f.Add(uint32(7), "x", "auto", "y", ^uint32(0), "z", "", "")
	f.Fuzz(func(t *testing.T, v1 uint32, n1, d1, c1 string, v2 uint32, n2, d2, c2 string) {
		rows := []appliedMigration{{v1, n1, d1, c1}, {v2, n2, d2, c2}}
		st, err := parseApplied(rows)
		if err != nil {
			if !errors.Is(err, ErrMigrationTable) {
				t.Fatalf("parse error %v does not wrap ErrMigrationTable", err)
			}
			return
		}
		if v1 == 0 || v2 == 0 || st.version != int(max(v1, v2)) || (st.dialect != DialectLegacy && st.dialect != DialectModern) {
			t.Fatalf("accepted %+v as %+v", rows, st)
		}
		if err := st.verify(ms, "db"); err == nil && st.version > len(ms) {
			t.Fatalf("version %d beyond %d migrations verified", st.version, len(ms))
		}
	})
}

// TestColumnAlreadyAdded: only an ADD COLUMN refused because the column exists counts as applied.
func TestColumnAlreadyAdded(t *testing.T) {
	add := "ALTER TABLE probe_events ADD COLUMN instance String AFTER trace_id, MODIFY ORDER BY (topic, partition, seq, instance)"
	exists18 := &clickhouse.Exception{Code: 44, Message: "Cannot add column instance: column with this name already exists"}
	for _, tc := range []struct {
		name string
		stmt string
		err  error
		want bool
	}{
		{"18.16 duplicate column", add, exists18, true},
		{"current release duplicate column", add, &clickhouse.Exception{Code: 15, Message: "Cannot add column `instance`: column with this name already exists"}, true},
		// the same code for another reason (a default expression in a new sorting key) is a real failure
		{"illegal column otherwise", add, &clickhouse.Exception{Code: 44, Message: "Newly added column instance has a default expression"}, false},
		{"not an ADD COLUMN", "CREATE TABLE IF NOT EXISTS x (a Int8) ENGINE = Memory", exists18, false},
		{"not a server error", add, errors.New("connection reset: already exists"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ColumnAlreadyAdded(tc.stmt, tc.err); got != tc.want {
				t.Fatalf("ColumnAlreadyAdded = %v, want %v", got, tc.want)
			}
		})
	}
}
