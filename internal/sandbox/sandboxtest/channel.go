package sandboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// CounterJS keeps a counter in memory only: each "inc" on its channel adds
// one and answers the new value ({"n":1}, ...); "exit" answers "bye" and
// ends it.
const CounterJS = `
const net = require('net'), readline = require('readline');
const s = new net.Socket({ fd: 3, readable: true, writable: true });
let n = 0;
readline.createInterface({ input: s }).on('line', (line) => {
  if (line === '"exit"') { s.write('"bye"\n', () => process.exit(0)); return; }
  n++;
  s.write(JSON.stringify({ n }) + '\n');
});
`

// ChannelProc is a process with a channel, run by Exec on its own
// goroutine (ExecChannel).
type ChannelProc struct {
	sender chan sandbox.Sender
	// Msgs receives the process's messages.
	Msgs chan string
	// Done receives Exec's error once it returns; Status is set by then.
	Done   chan error
	Status sandbox.ExitStatus
}

// ExecChannel runs req in sb with a channel (req.Channel, Started and
// OnMessage are set here) and returns at once.
func ExecChannel(sb sandbox.Sandbox, req sandbox.ExecRequest) *ChannelProc {
	p := &ChannelProc{sender: make(chan sandbox.Sender, 1), Msgs: make(chan string, 16), Done: make(chan error, 1)}
	req.Channel = true
	req.Started = func(s sandbox.Sender) { p.sender <- s }
	req.OnMessage = func(m []byte) { p.Msgs <- string(m) }
	go func() {
		st, err := sb.Exec(context.Background(), req)
		p.Status = st
		p.Done <- err
	}()
	return p
}

// Ask sends msg and returns the process's answer.
func (p *ChannelProc) Ask(t *testing.T, s sandbox.Sender, msg string) string {
	t.Helper()
	if err := s.Send([]byte(msg)); err != nil {
		t.Fatalf("Send(%s) = %v", msg, err)
	}
	select {
	case m := <-p.Msgs:
		return m
	case err := <-p.Done:
		// A process that answers and exits (the answer to "exit") can end
		// Exec right after its message came: both are ready, and select
		// picks either. Its messages are delivered before Exec returns.
		select {
		case m := <-p.Msgs:
			p.Done <- err // for the caller's wait for the end
			return m
		default:
		}
		t.Fatalf("process ended (%v) before answering %s", err, msg)
	case <-time.After(30 * time.Second):
		t.Fatalf("no answer to %s", msg)
	}
	return ""
}

// Started waits for the process to start and returns its channel.
func (p *ChannelProc) Started(t *testing.T) sandbox.Sender {
	t.Helper()
	select {
	case s := <-p.sender:
		return s
	case err := <-p.Done:
		t.Fatalf("process ended before it started: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("process did not start")
	}
	return nil
}
