package build

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// ignoreRules are a project's .helmrignore (or, without one, its
// .dockerignore): files that directory copy sources leave out. As in
// .dockerignore, patterns are relative to the project root, "*" and "?"
// stay within a path element, "**" spans any number of them, a pattern
// that matches a directory excludes everything in it, "!" re-includes,
// and the last matching pattern decides.
type ignoreRules []ignoreRule

type ignoreRule struct {
	re      *regexp.Regexp
	include bool
}

// loadIgnore reads root's ignore file; none is no rules.
func loadIgnore(root string) (ignoreRules, error) {
	var data []byte
	var err error
	for _, name := range []string{".helmrignore", ".dockerignore"} {
		if data, err = os.ReadFile(filepath.Join(root, name)); err == nil {
			break
		}
		if !os.IsNotExist(err) {
			return nil, err
		}
	}
	var rules ignoreRules
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			r.include, line = true, strings.TrimSpace(rest)
		}
		line = strings.TrimPrefix(path.Clean("/"+line), "/")
		if line == "" {
			continue
		}
		r.re = regexp.MustCompile("^" + globRegexp(line) + "$")
		rules = append(rules, r)
	}
	return rules, nil
}

func globRegexp(glob string) string {
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; {
		case c == '*' && i+1 < len(glob) && glob[i+1] == '*':
			i++
			if i+1 < len(glob) && glob[i+1] == '/' {
				i++
				b.WriteString("(.*/)?")
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

// ignored reports whether rel (a slash path relative to the project root)
// is excluded: the last rule matching it or one of its parent directories
// decides.
func (rules ignoreRules) ignored(rel string) bool {
	excluded := false
	for _, r := range rules {
		if r.matches(rel) {
			excluded = !r.include
		}
	}
	return excluded
}

func (r ignoreRule) matches(rel string) bool {
	for p := rel; p != "." && p != ""; p = path.Dir(p) {
		if r.re.MatchString(p) {
			return true
		}
		if !strings.Contains(p, "/") {
			break
		}
	}
	return false
}
