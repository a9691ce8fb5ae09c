package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Migration is one forward-only schema step, from a file named
// NNNN_description.sql; Version is NNNN.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads dir of fsys (an engine's embedded migrations) and
// returns its migrations in version order. Versions must be 1, 2, 3, ...
// without gaps or duplicates.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name does not start with a version number", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d (versions are 1, 2, 3, ... without gaps)", m.Name, m.Version, i+1)
		}
	}
	return ms, nil
}

// Pending returns the migrations after version current, or an error when the
// database's schema is newer than the newest migration this binary knows.
func Pending(ms []Migration, current int) ([]Migration, error) {
	if current > len(ms) {
		return nil, fmt.Errorf("database schema version %d is newer than this binary supports (%d): upgrade helmr", current, len(ms))
	}
	return ms[current:], nil
}

//go:embed migrations/*.sql
var migrationFS embed.FS

// Types are an engine's words for what the shared migrations name as
// {{.Time}}, {{.Blob}} and so on (text/template).
type Types struct {
	Postgres     bool   // for what only PostgreSQL has, such as GIN indexes
	Time         string // a time: timestamptz, or TimeFormat TEXT
	Blob         string // bytes
	Real         string // a float64
	BigInt       string // an int64 where SQLite says INTEGER
	Serial       string // an int64 primary key the database assigns
	Strings      string // a list of strings, never NULL, empty by default
	WithoutRowID string // after a table with a primary key it is looked up by
}

// Migrations returns the shared migrations in d's SQL.
func Migrations(d *Dialect) ([]Migration, error) {
	ms, err := LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	for i, m := range ms {
		if ms[i].SQL, err = render(m.Name, m.SQL, d.Types); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

func render(name, text string, types Types) (string, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", fmt.Errorf("migration %s: %w", name, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, types); err != nil {
		return "", fmt.Errorf("migration %s: %w", name, err)
	}
	return b.String(), nil
}

// Migrate applies the migrations the database lacks, all in one
// transaction, holding the lock on schema_migrations so that replicas
// starting together take turns. It refuses a database whose schema is
// newer than this binary knows.
func (db *DB) Migrate(ctx context.Context, log *slog.Logger) error {
	ms, err := Migrations(db.d)
	if err != nil {
		return err
	}
	ddl, err := render("schema_migrations", `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at {{.Time}} NOT NULL)`, db.d.Types)
	if err != nil {
		return err
	}
	return db.write(ctx, func(tx txConn) error {
		if err := tx.lock(ctx, "schema_migrations", ""); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, ddl); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var current int
		if err := tx.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		pending, err := Pending(ms, current)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, Time(time.Time{})); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
			log.Info("applied migration", "engine", db.d.Name, "migration", m.Name)
		}
		return nil
	})
}

var createTable = regexp.MustCompile(`(?i)\bCREATE TABLE\s+(?:IF NOT EXISTS\s+)?(\w+)`)

// Tables returns the tables the migrations create, in order.
func Tables() ([]string, error) {
	ms, err := LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		for _, match := range createTable.FindAllStringSubmatch(m.SQL, -1) {
			out = append(out, match[1])
		}
	}
	return out, nil
}
