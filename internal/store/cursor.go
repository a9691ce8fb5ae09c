package store

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// cursor is the keyset position of the last run of a page: lists are ordered
// by (created_at, id) descending, so the next page starts strictly below it,
// and runs inserted meanwhile neither shift nor repeat older ones.
type cursor struct {
	T  int64  `json:"t"` // created_at, Unix microseconds
	ID string `json:"id"`
}

// EncodeCursor returns the opaque cursor following the run created at t with id.
func EncodeCursor(t time.Time, id string) string {
	b, _ := json.Marshal(cursor{T: t.UnixMicro(), ID: id})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor reverses EncodeCursor; a malformed cursor is errdefs.ErrInvalid.
func DecodeCursor(s string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var c cursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.ID == "" {
		return time.Time{}, "", fmt.Errorf("cursor %q: %w", s, errdefs.ErrInvalid)
	}
	return time.UnixMicro(c.T).UTC(), c.ID, nil
}
