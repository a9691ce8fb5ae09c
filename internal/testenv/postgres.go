package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresURL returns HELMR_TEST_DATABASE_URL (scripts/postgres-test.sh
// starts a local server and prints it), or skips tb without it.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("HELMR_TEST_DATABASE_URL")
	Require(tb, u != "", "HELMR_TEST_DATABASE_URL not set (scripts/postgres-test.sh starts a local server)")
	return u
}

// PostgresSchema creates a uniquely named schema in the test database,
// drops it when tb ends, and returns a URL whose connections use it.
func PostgresSchema(tb testing.TB) string {
	tb.Helper()
	admin := PostgresURL(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("connect to HELMR_TEST_DATABASE_URL: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "helmr_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		tb.Fatalf("create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("HELMR_TEST_DATABASE_URL must be a postgres:// URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
