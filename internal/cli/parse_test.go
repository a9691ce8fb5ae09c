package cli

import (
	"flag"
	"io"
	"slices"
	"testing"
)

// TestParse: flags before and after positional arguments; everything
// after -- is positional, dashes included, wherever -- comes.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args, want []string
		shell      bool
	}{
		{[]string{"ws", "--", "ln", "-s", "/etc", "out"}, []string{"ws", "ln", "-s", "/etc", "out"}, false},
		{[]string{"--shell", "ws", "--", "echo -n x"}, []string{"ws", "echo -n x"}, true},
		{[]string{"ws", "--shell", "--", "-x", "--shell"}, []string{"ws", "-x", "--shell"}, true},
		{[]string{"--", "-ws"}, []string{"-ws"}, false},
		{[]string{"a", "b", "--shell"}, []string{"a", "b"}, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		shell := fs.Bool("shell", false, "")
		got, err := parse(fs, c.args)
		if err != nil || !slices.Equal(got, c.want) || *shell != c.shell {
			t.Errorf("parse(%q) = %q, shell %v, %v; want %q, shell %v", c.args, got, *shell, err, c.want, c.shell)
		}
	}
}
