// Package channel is the worker's side of the TypeScript guest adapter's
// channel: newline-delimited JSON objects on the adapter's fd 3, which the
// guest agent relays as message frames. The worker sends a start message
// and answers each of the adapter's requests (ctx.wait.*, ctx.session.*,
// ctx.metadata.*, tasks.*) with a response of the same id; the adapter
// ends with one result or error.
//
// proto/adapter-channel.schema.json describes every message type and
// request method declared here, and proto/adapter-channel.golden.json holds
// examples of each. This package's tests (and runtime/typescript's) check
// the encodings against both, and fail on a type or method that either
// lacks.
package channel

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/waitpoints"
)

// Type is a message's "type".
type Type string

// The message types.
const (
	TypeStart    Type = "start"    // worker → adapter, first
	TypeResult   Type = "result"   // adapter → worker, last: the run's output
	TypeError    Type = "error"    // adapter → worker, last: the run failed
	TypeRequest  Type = "request"  // adapter → worker
	TypeResponse Type = "response" // worker → adapter, to a request
)

// Method is a request's "method".
type Method string

// The request methods, with their params and results.
const (
	MethodWaitHuman           Method = "wait.human"            // WaitHumanParams → waitpoints.Result
	MethodWaitCreateToken     Method = "wait.createToken"      // CreateTokenParams → TokenResult
	MethodWaitForToken        Method = "wait.forToken"         // ForTokenParams → waitpoints.Result
	MethodWaitFor             Method = "wait.for"              // WaitForParams → null
	MethodWaitUntil           Method = "wait.until"            // WaitUntilParams → null
	MethodSessionInputNext    Method = "session.input.next"    // InputNextParams → InputRecords
	MethodSessionOutputAppend Method = "session.output.append" // OutputAppendParams → AppendResult
	MethodMetadataSet         Method = "metadata.set"          // MetadataSetParams → null
	MethodTasksTrigger        Method = "tasks.trigger"         // TriggerParams → TriggerResult
	MethodTasksTriggerAndWait Method = "tasks.triggerAndWait"  // TriggerParams → waitpoints.Result (data: []runs.ChildResult)
)

// Methods lists every request method.
var Methods = []Method{
	MethodWaitHuman, MethodWaitCreateToken, MethodWaitForToken, MethodWaitFor, MethodWaitUntil,
	MethodSessionInputNext, MethodSessionOutputAppend, MethodMetadataSet,
	MethodTasksTrigger, MethodTasksTriggerAndWait,
}

// Envelope is what every message has: its type.
type Envelope struct {
	Type Type `json:"type"`
}

// RunInfo is the run a start message starts.
type RunInfo struct {
	ID     string `json:"id"`
	TaskID string `json:"taskId"`
}

// Start is the first message: the task to run with its payload, and
// variables the adapter adds to its environment before it loads the task.
type Start struct {
	Type    Type              `json:"type"`
	Module  string            `json:"module"`
	Export  string            `json:"export"`
	Payload json.RawMessage   `json:"payload"` // null: none
	Run     RunInfo           `json:"run"`
	Env     map[string]string `json:"env,omitempty"`
}

// Result is the run's output (any JSON; null for undefined).
type Result struct {
	Type   Type            `json:"type"`
	Output json.RawMessage `json:"output"`
}

// Error says the run failed: what the task threw (or why it could not
// run).
type Error struct {
	Type    Type   `json:"type"`
	Name    string `json:"name"`
	Message string `json:"message"`
	Stack   string `json:"stack"`
}

// Request is a call from the adapter; Params decode into the method's
// params type.
type Request struct {
	Type   Type            `json:"type"`
	ID     int64           `json:"id"`
	Method Method          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Response answers the request of the same id with a result or an error.
type Response struct {
	Type   Type            `json:"type"`
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ResponseError  `json:"error,omitempty"`
}

// ResponseError is a request's failure as the adapter throws it.
type ResponseError struct {
	Message string `json:"message"`
	Name    string `json:"name,omitempty"`
}

// Answer encodes the response to request id: result (nil: null) or, if
// err is set, the error.
func Answer(id int64, result any, err error) ([]byte, error) {
	resp := Response{Type: TypeResponse, ID: id}
	if err != nil {
		resp.Error = &ResponseError{Message: err.Error()}
	} else {
		b, merr := json.Marshal(result)
		if merr != nil {
			return nil, fmt.Errorf("encode the result of request %d: %w", id, merr)
		}
		resp.Result = b
	}
	return json.Marshal(resp)
}

// WaitHumanParams are wait.human's params.
type WaitHumanParams struct {
	DisplayText    string          `json:"displayText"`
	TimeoutSeconds float64         `json:"timeoutSeconds,omitempty"`
	Schema         json.RawMessage `json:"schema,omitempty"`
}

// CreateTokenParams are wait.createToken's params.
type CreateTokenParams struct {
	TimeoutSeconds float64  `json:"timeoutSeconds,omitempty"`
	IdempotencyKey string   `json:"idempotencyKey,omitempty"`
	Tags           []string `json:"tags,omitempty"`
}

// TokenResult is wait.createToken's result: the token and its callback
// URL (empty for the repeat of an idempotency key).
type TokenResult struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// ForTokenParams are wait.forToken's params.
type ForTokenParams struct {
	Token          string  `json:"token"`
	TimeoutSeconds float64 `json:"timeoutSeconds,omitempty"`
}

// WaitForParams are wait.for's params.
type WaitForParams struct {
	Seconds float64 `json:"seconds"`
}

// WaitUntilParams are wait.until's params.
type WaitUntilParams struct {
	Until string `json:"until"` // RFC 3339
}

// Time is Until parsed.
func (p WaitUntilParams) Time() (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, p.Until)
	if err != nil {
		return time.Time{}, fmt.Errorf("wait.until: until %q is not an RFC 3339 time", p.Until)
	}
	return t, nil
}

// InputNextParams are session.input.next's params: read after this seq.
type InputNextParams struct {
	After int64 `json:"after"`
}

// InputRecords is session.input.next's result.
type InputRecords struct {
	Records []runs.Record `json:"records"`
}

// OutputAppendParams are session.output.append's params: ID is the
// append's idempotency key.
type OutputAppendParams struct {
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data"`
}

// AppendResult is session.output.append's result.
type AppendResult struct {
	Seq int64 `json:"seq"`
}

// MetadataSetParams are metadata.set's params.
type MetadataSetParams struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// WaitResult is the result of wait.human and wait.forToken: how the wait
// ended, as the task sees it.
type WaitResult = waitpoints.Result

// TriggerParams are the params of tasks.trigger and tasks.triggerAndWait:
// the runs to trigger as children of the run, in order (one for trigger
// and triggerAndWait, several for their batch forms).
type TriggerParams struct {
	Items []runs.ChildItem `json:"items"`
}

// TriggerResult is tasks.trigger's result: the children, in order.
// tasks.triggerAndWait answers a WaitResult whose data is the children's
// results ([]runs.ChildResult), in order, once all of them have ended.
type TriggerResult struct {
	Runs []runs.ChildRun `json:"runs"`
}
