package cli

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// TestParse: flags before and after positional arguments; everything
// after -- is positional, dashes included, wherever -- comes (as helmr
// exec WS -- CMD... needs).
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
		var got []string
		var shell bool
		cmd := &cobra.Command{Use: "t", SilenceErrors: true, SilenceUsage: true,
			RunE: func(_ *cobra.Command, args []string) error { got = args; return nil }}
		cmd.Flags().BoolVar(&shell, "shell", false, "")
		cmd.SetArgs(c.args)
		err := cmd.Execute()
		if err != nil || !slices.Equal(got, c.want) || shell != c.shell {
			t.Errorf("parse(%q) = %q, shell %v, %v; want %q, shell %v", c.args, got, shell, err, c.want, c.shell)
		}
	}
}
