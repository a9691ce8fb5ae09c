package store

import (
	"encoding/json"
	"fmt"

	"github.com/helmr/helmr/internal/apikeys"
)

// EncodeGrants is a key's grants as stored (a JSON array).
func EncodeGrants(gs []apikeys.Grant) string {
	if gs == nil {
		gs = []apikeys.Grant{}
	}
	data, _ := json.Marshal(gs)
	return string(data)
}

// DecodeGrants reads stored grants.
func DecodeGrants(keyID, s string) ([]apikeys.Grant, error) {
	var gs []apikeys.Grant
	if err := json.Unmarshal([]byte(s), &gs); err != nil {
		return nil, fmt.Errorf("decode grants of API key %s: %w", keyID, err)
	}
	return gs, nil
}
