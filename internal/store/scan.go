package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// TimeFormat is how SQLite stores times: fixed-width UTC with
// microseconds, so that stored times sort as text.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// scanner is a row: *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// timeCol scans a stored time into *t: a time (PostgreSQL's timestamptz)
// or TimeFormat text (SQLite), read as UTC.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	t, err := parseTime(src)
	if err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("stored time is NULL")
	}
	*c.t = *t
	return nil
}

// nullTimeCol scans a stored time that may be NULL (nil) into *t.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(src any) error {
	t, err := parseTime(src)
	*c.t = t
	return err
}

func parseTime(src any) (*time.Time, error) {
	var s string
	switch v := src.(type) {
	case nil:
		return nil, nil
	case time.Time:
		t := v.UTC()
		return &t, nil
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return nil, fmt.Errorf("stored time of type %T", src)
	}
	t, err := time.Parse(TimeFormat, s)
	if err != nil {
		return nil, fmt.Errorf("parse stored time %q: %w", s, err)
	}
	t = t.UTC()
	return &t, nil
}

// jsonCol scans text that may be NULL (nil) into *j.
type jsonCol struct{ j *json.RawMessage }

func (c jsonCol) Scan(src any) error {
	var s sql.NullString
	if err := s.Scan(src); err != nil {
		return err
	}
	*c.j = nil
	if s.Valid {
		*c.j = json.RawMessage(s.String)
	}
	return nil
}

// textCol scans text that may be NULL ("") into *s.
type textCol struct{ s *string }

func (c textCol) Scan(src any) error {
	var s sql.NullString
	err := s.Scan(src)
	*c.s = s.String
	return err
}

// nullText maps empty JSON or strings to NULL.
func nullText[T ~string | ~[]byte](v T) any {
	if len(v) == 0 {
		return nil
	}
	return string(v)
}

// scanAll reads every row of rows with scan; an error of the query comes
// first.
func scanAll[T any](rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
