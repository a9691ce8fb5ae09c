package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// Follow streams a run's events over SSE from the cursor after, calling fn
// for each event in order, until the run's stream ends. A dropped
// connection is resumed with Last-Event-ID, so no event is lost or
// repeated.
func (c *Client) Follow(ctx context.Context, id string, after int64, fn func(runs.Event) error) error {
	failures := 0
	for {
		end, last, err := c.streamOnce(ctx, id, after, fn)
		after = last
		if end {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			return err
		}
		failures++
		if failures > 20 {
			return fmt.Errorf("follow run %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(failures) * 100 * time.Millisecond):
		}
	}
}

// streamOnce reads one SSE connection; end is true after the "end" event.
func (c *Client) streamOnce(ctx context.Context, id string, after int64, fn func(runs.Event) error) (end bool, last int64, err error) {
	last = after
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/runs/"+url.PathEscape(id)+"/events/stream", nil)
	if err != nil {
		return false, last, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return false, last, unwrapURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, last, decodeError(resp)
	}
	return readSSE(resp.Body, last, fn)
}

func readSSE(r io.Reader, last int64, fn func(runs.Event) error) (bool, int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "end" {
				return true, last, nil
			}
			if data != "" {
				var ev runs.Event
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					return false, last, fmt.Errorf("bad event: %w", err)
				}
				if ev.Seq > last {
					if err := fn(ev); err != nil {
						return true, last, err
					}
					last = ev.Seq
				}
			}
			event, data = "", ""
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	if err := sc.Err(); err != nil {
		return false, last, err
	}
	return false, last, io.ErrUnexpectedEOF
}
