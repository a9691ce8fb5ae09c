package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/helmr/helmr/internal/apikeys"
)

// CreateAPIKey makes an API key (owner only) and returns it with the key
// itself, which the control plane does not keep.
func (c *Client) CreateAPIKey(ctx context.Context, req apikeys.CreateRequest) (apikeys.Key, string, error) {
	var out struct {
		Key    string      `json:"key"`
		APIKey apikeys.Key `json:"apiKey"`
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/apikeys", nil, req, &out)
	return out.APIKey, out.Key, err
}

// ListAPIKeys returns every API key's metadata (owner only).
func (c *Client) ListAPIKeys(ctx context.Context) ([]apikeys.Key, error) {
	var out struct {
		APIKeys []apikeys.Key `json:"apiKeys"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/apikeys", nil, nil, &out)
	return out.APIKeys, err
}

// RevokeAPIKey revokes an API key (owner only).
func (c *Client) RevokeAPIKey(ctx context.Context, id string) (apikeys.Key, error) {
	var k apikeys.Key
	_, err := c.do(ctx, http.MethodPost, "/v1/apikeys/"+url.PathEscape(id)+"/revoke", nil, nil, &k)
	return k, err
}

// CreateWorkerCredential makes a worker credential (owner only) and
// returns it with the credential itself, which the control plane does not
// keep.
func (c *Client) CreateWorkerCredential(ctx context.Context, req apikeys.CreateWorkerRequest) (apikeys.Key, string, error) {
	var out struct {
		Key    string      `json:"key"`
		APIKey apikeys.Key `json:"apiKey"`
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/apikeys/worker", nil, req, &out)
	return out.APIKey, out.Key, err
}
