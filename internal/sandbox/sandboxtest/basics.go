package sandboxtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// runBasics checks the runtime contract's filesystem, identity and exec
// features on one sandbox running as a non-root uid.
func runBasics(t *testing.T, f *fixture, opts Options) {
	parent := t // the fixture's test: it outlives the subtests
	t.Run("WorkspaceIsCwdAndWritable", func(t *testing.T) {
		if got := f.OK(t, "pwd"); got != f.Spec.Workspace+"\n" {
			t.Errorf("pwd = %q, want %q", got, f.Spec.Workspace+"\n")
		}
		f.Node(t, `require('fs').writeFileSync('from-node.txt', 'written by node ' + process.version)`)
		check := func(t testing.TB, when string) {
			b, err := os.ReadFile(filepath.Join(f.Workspace, "from-node.txt"))
			if err != nil || !strings.HasPrefix(string(b), "written by node v") {
				t.Errorf("host read of from-node.txt %s = %q, %v; want the sandbox's write", when, b, err)
			}
		}
		if !opts.WorkspaceImage {
			check(t, "while the sandbox runs")
			return
		}
		f.afterDestroy = append(f.afterDestroy, func() { check(parent, "after Destroy") })
	})
	t.Run("Devices", func(t *testing.T) {
		got := f.Node(t, devicesJS)
		if got != "ok\n" {
			t.Errorf("device checks printed %q, want ok", got)
		}
	})
	t.Run("Mounts", func(t *testing.T) {
		script := `set -e; for d in /proc /dev/pts /dev/shm /tmp /run /opt/helmr; do test -d $d; done
test -r /proc/self/status
echo x > /tmp/x; echo x > /dev/shm/x; stat -c %a /tmp /dev/shm`
		if got := f.OK(t, "sh", "-c", script); got != "1777\n1777\n" {
			t.Errorf("mount checks printed %q, want modes 1777 for /tmp and /dev/shm", got)
		}
	})
	t.Run("IdentityFiles", func(t *testing.T) {
		checkIdentity(t, f)
	})
	t.Run("OptHelmrReadOnly", func(t *testing.T) {
		if got := f.OK(t, "node", "/opt/helmr/hello.js"); got != "hello from /opt/helmr\n" {
			t.Errorf("node /opt/helmr/hello.js = %q", got)
		}
	})
	t.Run("OutputChunks", func(t *testing.T) {
		r := f.Exec(t, "sh", "-c", "printf a; sleep 0.3; printf b; echo err >&2")
		if r.Err != nil || r.Stdout != "ab" || r.Stderr != "err\n" || len(r.Chunks) < 2 || r.Chunks[0] != "a" {
			t.Errorf("Exec(printf) = %q chunks %q stderr %q, %v; want chunks a, b and stderr err", r.Stdout, r.Chunks, r.Stderr, r.Err)
		}
	})
	t.Run("Stdin", func(t *testing.T) {
		r := f.ExecReq(t, sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("to stdin\n")})
		if r.Err != nil || r.Stdout != "to stdin\n" {
			t.Errorf("Exec(cat) = %q, %v; want stdin echoed", r.Stdout, r.Err)
		}
	})
	t.Run("Channel", func(t *testing.T) { testChannel(t, f) })
	t.Run("MissingBinary", func(t *testing.T) {
		r := f.Exec(t, "/no/such-binary")
		if r.Err == nil || !errors.Is(r.Err, sandbox.ErrExecStart) || !strings.Contains(r.Err.Error(), "/no/such-binary") {
			t.Errorf("Exec(/no/such-binary) = %+v, %v; want ErrExecStart naming the path", r.Status, r.Err)
		}
		f.OK(t, "true") // the sandbox is still usable
	})
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, f) })
	t.Run("CancelKills", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		st, err := f.SB.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sleep", "60"}})
		if !errors.Is(err, context.DeadlineExceeded) || st.Signal != "killed" {
			t.Errorf("Exec(sleep 60) with a 300ms context = %+v, %v; want killed, DeadlineExceeded", st, err)
		}
	})
}

// devicesJS checks the device nodes and a pty; it prints ok or throws.
const devicesJS = `
const fs = require('fs');
for (const d of ['null', 'zero', 'full', 'random', 'urandom', 'tty', 'ptmx'])
  if (!fs.statSync('/dev/' + d).isCharacterDevice()) throw new Error('/dev/' + d + ' is not a character device');
const buf = Buffer.alloc(16, 7);
let fd = fs.openSync('/dev/zero', 'r'); fs.readSync(fd, buf); fs.closeSync(fd);
if (!buf.every(b => b === 0)) throw new Error('/dev/zero gave ' + buf.toString('hex'));
fd = fs.openSync('/dev/urandom', 'r'); fs.readSync(fd, buf); fs.closeSync(fd);
fs.writeFileSync('/dev/null', 'discarded');
try { fs.writeFileSync('/dev/full', 'x'); throw new Error('/dev/full accepted a write'); }
catch (e) { if (e.code !== 'ENOSPC') throw e; }
fd = fs.openSync('/dev/ptmx', 'r+'); fs.closeSync(fd);
if (!fs.statSync('/dev/pts').isDirectory()) throw new Error('no /dev/pts');
console.log('ok');
`

func checkIdentity(t *testing.T, f *fixture) {
	got := f.Node(t, `const fs = require('fs'), os = require('os');
console.log(JSON.stringify([fs.readFileSync('/etc/hostname', 'utf8'), os.hostname(),
  fs.readFileSync('/etc/hosts', 'utf8'), fs.readFileSync('/etc/resolv.conf', 'utf8')]))`)
	for _, want := range []string{`"helmr-sandbox\n","helmr-sandbox"`, "localhost", `\thelmr-sandbox`, "nameserver " + testDNS} {
		if !strings.Contains(got, want) {
			t.Errorf("hostname, hosts, resolv.conf = %s; want it to contain %q", got, want)
		}
	}
	r := f.Exec(t, "sh", "-c", "command -v hostname >/dev/null || exit 0; hostname")
	if r.Err != nil || (r.Stdout != "" && r.Stdout != "helmr-sandbox\n") {
		t.Errorf("hostname = %q, %v; want helmr-sandbox", r.Stdout, r.Err)
	}
}

const channelJS = `
const net = require('net'), readline = require('readline');
const s = new net.Socket({ fd: 3, readable: true, writable: true });
s.write(JSON.stringify({ hello: 'worker' }) + '\n');
readline.createInterface({ input: s }).once('line', (line) => {
  const m = JSON.parse(line);
  s.write(JSON.stringify({ reply: m.n + 1 }) + '\n', () => s.destroy());
});
`

func testChannel(t *testing.T, f *fixture) {
	var mu sync.Mutex
	var got []string
	var sendErr error
	req := sandbox.ExecRequest{
		Argv:    []string{"node", "-e", channelJS},
		Channel: true,
		OnMessage: func(m []byte) {
			mu.Lock()
			got = append(got, string(m))
			mu.Unlock()
		},
		Started: func(s sandbox.Sender) { sendErr = s.Send([]byte(`{"n":41}`)) },
	}
	r := f.ExecReq(t, req)
	want := `{"hello":"worker"}|{"reply":42}`
	if r.Err != nil || r.Status.Code != 0 || sendErr != nil || strings.Join(got, "|") != want {
		t.Errorf("channel exec = %+v, %v (send %v), messages %q, stderr %q; want %s", r.Status, r.Err, sendErr, got, r.Stderr, want)
	}
}

func testConcurrent(t *testing.T, f *fixture) {
	var wg sync.WaitGroup
	results := make([]result, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = f.Exec(t, "sh", "-c", "sleep 0.2; echo $$")
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, r := range results {
		if r.Err != nil || r.Status.Code != 0 || r.Stdout == "" || seen[r.Stdout] {
			t.Errorf("concurrent Exec = %q, %v; want distinct pids", r.Stdout, r.Err)
		}
		seen[r.Stdout] = true
	}
}
