package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/vault"
)

const secretUsage = "usage: helmr secret set NAME (the value on stdin) | list | delete NAME | rotate-key --new-key-file FILE"

// runSecret manages the vault: values go in through stdin only (never
// argv, where other users of the machine and shell history would see
// them) and never come out.
func runSecret(ctx context.Context, a *App, args []string) error {
	if len(args) == 0 {
		return errors.New(secretUsage)
	}
	if args[0] == "rotate-key" {
		return rotateKey(ctx, a, args[1:])
	}
	fs := a.flags("secret " + args[0])
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	switch args[0] {
	case "set":
		if len(pos) != 1 {
			return errors.New("usage: printf '%s' \"$VALUE\" | helmr secret set NAME (a value is read from stdin, never from the command line)")
		}
		if f, ok := a.Stdin.(*os.File); ok && isTerminal(f) {
			return errors.New("helmr secret set reads the value from stdin: pipe it in, for example printf '%s' \"$VALUE\" | helmr secret set " + pos[0])
		}
		value, err := io.ReadAll(io.LimitReader(a.Stdin, vault.MaxValueBytes+1))
		if err != nil {
			return fmt.Errorf("read the value from stdin: %w", err)
		}
		m, err := c.SetSecret(ctx, a.cfg.Project, a.cfg.Env, pos[0], value)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(m)
		}
		fmt.Fprintf(a.Stdout, "secret %s set in %s/%s (%d bytes, encrypted at rest)\n", m.Name, m.Project, m.Env, len(value))
		return nil
	case "list":
		ms, err := c.ListSecrets(ctx, a.cfg.Project, a.cfg.Env)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(ms)
		}
		tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCREATED\tUPDATED")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, m.CreatedAt.Local().Format(time.DateTime), m.UpdatedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	case "delete":
		if len(pos) != 1 {
			return errors.New("usage: helmr secret delete NAME")
		}
		if err := c.DeleteSecret(ctx, a.cfg.Project, a.cfg.Env, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout, "secret %s deleted from %s/%s\n", pos[0], a.cfg.Project, a.cfg.Env)
		return nil
	}
	return errors.New(secretUsage)
}

// rotateKey re-wraps the vault's data keys under a new master key, on the
// store itself (the control plane keeps running: it holds its data keys;
// restart it with the new key). The old key comes from HELMR_MASTER_KEY(_FILE),
// or helmr dev's key file in the data dir, which is then replaced.
func rotateKey(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "secret rotate-key")
	newFile := fs.String("new-key-file", "", "file holding the new master key (base64 of 32 bytes)")
	fs.StringVar(&a.cfg.DataDir, "data-dir", a.cfg.DataDir, "data directory of the embedded store ($HELMR_DATA_DIR)")
	if _, err := parse(fs.FlagSet, args); err != nil {
		return err
	}
	if *newFile == "" {
		return errors.New("usage: helmr secret rotate-key --new-key-file FILE (make one with: head -c32 /dev/urandom | base64 > FILE)")
	}
	newKey, err := vault.LoadMasterKey("", *newFile)
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
		data, _ := os.ReadFile(*newFile)
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
