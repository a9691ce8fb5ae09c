package store

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
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
