package guest

import "bytes"

// maxHeldLine is how much of one output line the scanner holds back to be
// able to drop it whole (see promptScanner); longer lines pass.
const maxHeldLine = 64 << 10

// promptScanner splits what a session's terminal prints into output and
// prompts. The prompt is secret + "#" + command number + ":" + $? + "#";
// any other line that shows the secret is the agent's own plumbing (the
// trace of the line it typed under set -x, its prompt settings in the
// output of set or declare -p) and is dropped whole.
type promptScanner struct {
	secret []byte
	out    func([]byte)        // output, in order
	prompt func(num, code int) // a prompt, after the output before it

	scan     []byte // bytes not yet classified (a possible partial secret or prompt)
	line     []byte // the current line's output, held until its end
	poisoned bool   // the current line shows the secret
	passing  bool   // the current line was too long to hold and is passed on
}

// write classifies data, calling out and prompt as it goes.
func (p *promptScanner) write(data []byte) {
	p.scan = append(p.scan, data...)
	for {
		i := bytes.Index(p.scan, p.secret)
		if i < 0 {
			keep := partialSuffix(p.scan, p.secret)
			p.text(p.scan[:len(p.scan)-keep])
			p.scan = append(p.scan[:0], p.scan[len(p.scan)-keep:]...)
			return
		}
		p.text(p.scan[:i])
		rest := p.scan[i+len(p.secret):]
		num, code, n, st := parsePromptTail(rest)
		switch st {
		case tailIncomplete:
			p.scan = append(p.scan[:0], p.scan[i:]...)
			return
		case tailPrompt:
			p.endLine()
			p.prompt(num, code)
			p.scan = append(p.scan[:0], rest[n:]...)
		default:
			p.poisoned = true
			p.text(p.secret)
			p.scan = append(p.scan[:0], rest...)
		}
	}
}

// text passes output on a line at a time, dropping poisoned lines.
func (p *promptScanner) text(b []byte) {
	for len(b) > 0 {
		j := bytes.IndexByte(b, '\n')
		if j < 0 {
			if p.passing {
				p.out(b)
				return
			}
			p.line = append(p.line, b...)
			if len(p.line) > maxHeldLine && !p.poisoned {
				p.out(p.line)
				p.line, p.passing = p.line[:0], true
			}
			return
		}
		if p.passing {
			p.out(b[:j+1])
		} else if p.line = append(p.line, b[:j+1]...); !p.poisoned {
			p.out(p.line)
		}
		p.line, p.poisoned, p.passing = p.line[:0], false, false
		b = b[j+1:]
	}
}

// endLine ends the current line (a prompt follows it on the same line).
func (p *promptScanner) endLine() {
	if !p.poisoned && len(p.line) > 0 {
		p.out(p.line)
	}
	p.line, p.poisoned, p.passing = p.line[:0], false, false
}

// finish ends the stream: whatever is held is output.
func (p *promptScanner) finish() {
	p.text(p.scan)
	p.scan = p.scan[:0]
	p.endLine()
}

// flushPartial passes on what is held of the current line, so that a
// result taken now has it; the rest of the line then passes too.
func (p *promptScanner) flushPartial() {
	if p.poisoned || len(p.line) == 0 {
		return
	}
	p.out(p.line)
	p.line, p.passing = p.line[:0], true
}

// partialSuffix is the length of the longest suffix of b that is a proper
// prefix of s.
func partialSuffix(b, s []byte) int {
	for n := min(len(b), len(s)-1); n > 0; n-- {
		if bytes.HasPrefix(s, b[len(b)-n:]) {
			return n
		}
	}
	return 0
}

// Outcomes of parsePromptTail.
const (
	tailNotPrompt = iota
	tailIncomplete
	tailPrompt
)

// parsePromptTail reads "#NUM:CODE#" at the start of b.
func parsePromptTail(b []byte) (num, code, n, st int) {
	const maxDigits = 18
	i := 0
	field := func(end byte) (v int, ok bool, more bool) {
		start := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if i-start >= maxDigits {
				return 0, false, false
			}
			v = v*10 + int(b[i]-'0')
		}
		switch {
		case i == len(b):
			return 0, false, true
		case i == start || b[i] != end:
			return 0, false, false
		}
		i++
		return v, true, false
	}
	if len(b) == 0 {
		return 0, 0, 0, tailIncomplete
	}
	if b[0] != '#' {
		return 0, 0, 0, tailNotPrompt
	}
	i = 1
	num, ok, more := field(':')
	if !ok {
		if more {
			return 0, 0, 0, tailIncomplete
		}
		return 0, 0, 0, tailNotPrompt
	}
	code, ok, more = field('#')
	if !ok {
		if more {
			return 0, 0, 0, tailIncomplete
		}
		return 0, 0, 0, tailNotPrompt
	}
	return num, code, i, tailPrompt
}

// textFilter makes terminal output plain as SWE-ReX does
// (_strip_control_chars): escape sequences matching
// \x1B[@-_][0-?]*[ -/]*[@-~] are removed, then "\r\n" becomes "\n". It
// works on a stream: a sequence or pair split between writes is held.
type textFilter struct {
	esc   []byte // a possible escape sequence, held
	state int    // escNone, escStart, escParams, escInter
	cr    bool   // a "\r" held
	buf   []byte
}

const (
	escNone = iota
	escStart
	escParams
	escInter
	maxEscape = 256
)

// write filters p and passes the result to out.
func (f *textFilter) write(p []byte, out func([]byte)) {
	f.buf = f.buf[:0]
	for _, c := range p {
		f.byte(c)
	}
	if len(f.buf) > 0 {
		out(f.buf)
	}
}

// flush passes on whatever is held, as it is.
func (f *textFilter) flush(out func([]byte)) {
	f.buf = f.buf[:0]
	f.release()
	if f.cr {
		f.buf = append(f.buf, '\r')
		f.cr = false
	}
	if len(f.buf) > 0 {
		out(f.buf)
	}
}

func (f *textFilter) byte(c byte) {
	switch f.state {
	case escNone:
		if c == 0x1b {
			f.esc, f.state = append(f.esc[:0], c), escStart
			return
		}
		f.plain(c)
		return
	case escStart:
		if c >= '@' && c <= '_' {
			f.esc, f.state = append(f.esc, c), escParams
			return
		}
	case escParams, escInter:
		switch {
		case f.state == escParams && c >= '0' && c <= '?':
			f.esc = append(f.esc, c)
			if len(f.esc) > maxEscape {
				f.release()
			}
			return
		case c >= ' ' && c <= '/':
			f.esc, f.state = append(f.esc, c), escInter
			if len(f.esc) > maxEscape {
				f.release()
			}
			return
		case c >= '@' && c <= '~':
			f.esc, f.state = f.esc[:0], escNone // a whole sequence: dropped
			return
		}
	}
	f.release() // not a sequence after all
	f.byte(c)
}

// release passes a held partial sequence on as text.
func (f *textFilter) release() {
	held := f.esc
	f.esc, f.state = f.esc[:0], escNone
	for _, c := range held {
		f.plain(c)
	}
}

func (f *textFilter) plain(c byte) {
	if f.cr {
		f.cr = false
		if c == '\n' {
			f.buf = append(f.buf, '\n')
			return
		}
		f.buf = append(f.buf, '\r')
	}
	if c == '\r' {
		f.cr = true
		return
	}
	f.buf = append(f.buf, c)
}

// capBuf keeps the first max bytes written to it and counts the rest.
type capBuf struct {
	b   []byte
	max int
	cut int64
}

func (c *capBuf) write(p []byte) {
	room := max(c.max-len(c.b), 0)
	if len(p) > room {
		c.cut += int64(len(p) - room)
		p = p[:room]
	}
	c.b = append(c.b, p...)
}

// take returns what the buffer holds and how much it cut, and empties it.
func (c *capBuf) take() ([]byte, int64) {
	b, cut := c.b, c.cut
	c.b, c.cut = nil, 0
	return b, cut
}

// absorb moves what o holds (and cut) into c.
func (c *capBuf) absorb(o *capBuf) {
	b, cut := o.take()
	c.write(b)
	c.cut += cut
}
