package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/vault"
)

const secretUsage = "usage: helmr secret set NAME [--hosts HOST,... [--body] | --in-sandbox] (the value on stdin) | list | delete NAME | rotate-key --new-key-file FILE"

// secretCmd manages the vault: values go in through stdin only (never
// argv, where other users of the machine and shell history would see
// them) and never come out.
func (a *App) secretCmd() *cobra.Command {
	var newKeyFile string
	var set setSecretFlags
	rotate := &cobra.Command{
		Use:   "rotate-key",
		Short: "re-wrap the vault's data keys under a new master key (--new-key-file)",
		Args:  exactly(0, secretUsage),
		RunE:  func(c *cobra.Command, _ []string) error { return rotateKey(c.Context(), a, newKeyFile) },
	}
	rotate.Flags().StringVar(&newKeyFile, "new-key-file", "", "file holding the new master key (base64 of 32 bytes)")
	setCmd := a.api(&cobra.Command{Use: "set NAME", Short: "set a secret: its value on stdin, never on the command line",
		Long: `Set a secret of the project environment. The value is read from stdin.

With --hosts the secret is bound for egress: its value never enters a
sandbox. Inside, the env var, file or ${vault:NAME} holds a placeholder, and
the worker's network stack puts the value into HTTPS requests to those hosts
only (headers, Basic credentials included; bodies too with --body).

Without --hosts a new secret is placed in the sandboxes that bind it, where
any command they run can read it (output redaction hides it from callers,
which stops mistakes, not a prompt-injected command): the weaker mode, for
tools that cannot work through a proxy (SSH and signing keys).
Setting an existing secret again keeps its mode unless --hosts or
--in-sandbox says otherwise.`,
		Args: exactly(1, "usage: printf '%s' \"$VALUE\" | helmr secret set NAME [--hosts HOST,...] (a value is read from stdin, never from the command line)"),
		RunE: func(c *cobra.Command, args []string) error { return a.setSecret(c.Context(), args[0], set) }})
	setCmd.Flags().StringSliceVar(&set.hosts, "hosts", nil, "bind the secret for egress to these hosts (api.github.com,*.github.com): its value never enters a sandbox")
	setCmd.Flags().BoolVar(&set.body, "body", false, "with --hosts: substitute the value in request bodies too (default: headers only)")
	setCmd.Flags().BoolVar(&set.inSandbox, "in-sandbox", false, "place the value itself in sandboxes (weaker: commands there can read it)")
	return parent(&cobra.Command{
		Use:     "secret COMMAND",
		Short:   "set, list and delete the project's secrets; rotate the vault's master key",
		GroupID: "admin",
	}, secretUsage,
		setCmd,
		a.api(&cobra.Command{Use: "list", Short: "list the project's secrets: names and times, never values", Args: exactly(0, secretUsage),
			RunE: func(c *cobra.Command, _ []string) error { return a.listSecrets(c.Context()) }}),
		a.api(&cobra.Command{Use: "delete NAME", Short: "delete a secret", Args: exactly(1, "usage: helmr secret delete NAME"),
			RunE: func(c *cobra.Command, args []string) error { return a.deleteSecret(c.Context(), args[0]) }}),
		rotate,
	)
}

// secretClient is the client of the secret verbs, which act on a project.
func (a *App) secretClient() (*client.Client, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return c, a.requireProject()
}

type setSecretFlags struct {
	hosts     []string
	body      bool
	inSandbox bool
}

func (a *App) setSecret(ctx context.Context, name string, f setSecretFlags) error {
	switch {
	case len(f.hosts) > 0 && f.inSandbox:
		return errors.New("helmr secret set: --hosts binds the secret for egress and --in-sandbox places it in sandboxes: choose one")
	case f.body && len(f.hosts) == 0:
		return errors.New("helmr secret set: --body applies to a secret bound for egress (--hosts HOST,...)")
	}
	var rule *vault.Egress
	if len(f.hosts) > 0 {
		n, err := vault.Egress{Hosts: f.hosts, Body: f.body}.Normalize()
		if err != nil {
			return fmt.Errorf("helmr secret set --hosts: %w", err)
		}
		rule = &n
	}
	c, err := a.secretClient()
	if err != nil {
		return err
	}
	if f, ok := a.Stdin.(*os.File); ok && isTerminal(f) {
		return errors.New("helmr secret set reads the value from stdin: pipe it in, for example printf '%s' \"$VALUE\" | helmr secret set " + name)
	}
	value, err := io.ReadAll(io.LimitReader(a.Stdin, vault.MaxValueBytes+1))
	if err != nil {
		return fmt.Errorf("read the value from stdin: %w", err)
	}
	var m vault.Meta
	if rule != nil || f.inSandbox {
		m, err = c.SetSecretWithEgress(ctx, a.cfg.Project, a.cfg.Env, name, value, rule)
	} else {
		m, err = c.SetSecret(ctx, a.cfg.Project, a.cfg.Env, name, value)
	}
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(m)
	}
	fmt.Fprintf(a.Stdout, "secret %s set in %s/%s (%d bytes, encrypted at rest)\n", m.Name, m.Project, m.Env, len(value))
	fmt.Fprintln(a.Stdout, "  "+secretModeLine(m))
	return nil
}

// secretModeLine says where a secret's value goes, in words.
func secretModeLine(m vault.Meta) string {
	if m.Egress != nil {
		where := "headers"
		if m.Egress.Body {
			where = "headers and bodies"
		}
		return fmt.Sprintf("egress-bound: the value never enters a sandbox; a placeholder stands for it there, replaced in HTTPS request %s to %s", where, strings.Join(m.Egress.Hosts, ", "))
	}
	return "in-sandbox (weaker): the value is placed in sandboxes that bind it, where their commands can read it; bind it for egress with --hosts unless a tool needs the value itself"
}

// secretMode is a secret's mode for a table.
func secretMode(m vault.Meta) string {
	if m.Egress != nil {
		return "egress: " + strings.Join(m.Egress.Hosts, ",")
	}
	return "in-sandbox (weaker)"
}

func (a *App) listSecrets(ctx context.Context) error {
	c, err := a.secretClient()
	if err != nil {
		return err
	}
	ms, err := c.ListSecrets(ctx, a.cfg.Project, a.cfg.Env)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(ms)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tCREATED\tUPDATED")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, secretMode(m), m.CreatedAt.Local().Format(time.DateTime), m.UpdatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func (a *App) deleteSecret(ctx context.Context, name string) error {
	c, err := a.secretClient()
	if err != nil {
		return err
	}
	if err := c.DeleteSecret(ctx, a.cfg.Project, a.cfg.Env, name); err != nil {
		return err
	}
	if !a.json {
		fmt.Fprintf(a.Stdout, "secret %s deleted from %s/%s\n", name, a.cfg.Project, a.cfg.Env)
	}
	return nil
}

// rotateKey re-wraps the vault's data keys under a new master key, on the
// store itself (the control plane keeps running: it holds its data keys;
// restart it with the new key). The old key comes from HELMR_MASTER_KEY(_FILE),
// or helmr dev's key file in the data dir, which is then replaced.
func rotateKey(ctx context.Context, a *App, newFile string) error {
	if newFile == "" {
		return errors.New("usage: helmr secret rotate-key --new-key-file FILE (make one with: head -c32 /dev/urandom | base64 > FILE)")
	}
	newKey, err := vault.LoadMasterKey("", newFile)
	if err != nil {
		return err
	}
	devKey := filepath.Join(a.cfg.DataDir, "master.key")
	oldValue, oldFile := a.cfg.MasterKey, a.cfg.MasterKeyFile
	usingDevKey := oldValue == "" && oldFile == ""
	if usingDevKey {
		oldFile = devKey
	}
	oldKey, err := vault.LoadMasterKey(oldValue, oldFile)
	if err != nil {
		return fmt.Errorf("the current master key: %w", err)
	}
	st, _, err := openStore(ctx, a.cfg, a.logger())
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := vault.Open(ctx, st, oldKey)
	if err != nil {
		return err
	}
	if err := v.RotateMasterKey(ctx, newKey); err != nil {
		return err
	}
	if usingDevKey {
		data, _ := os.ReadFile(newFile)
		if err := os.WriteFile(devKey, data, 0o600); err != nil {
			return fmt.Errorf("the data keys are re-wrapped, but %s could not be replaced with the new key: %w", devKey, err)
		}
	}
	fmt.Fprintln(a.Stdout, "vault data keys re-wrapped under the new master key; running control planes keep working: restart them with the new key")
	return nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
