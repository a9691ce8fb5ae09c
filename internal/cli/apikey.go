package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/client"
)

const apikeyUsage = "usage: helmr apikey create --env ENV --grant G1,G2 [--expires 30d] [--name NAME] | create --worker [--expires 30d] [--name NAME] | list | revoke ID"

// apikeyCmd manages API keys. Only the owner credential may: a key cannot
// make, see or revoke keys.
func (a *App) apikeyCmd() *cobra.Command {
	var o apikeyOptions
	create := &cobra.Command{
		Use:   "create",
		Short: "make an API key (--env ENV --grant G1,G2), or a worker credential (--worker); prints it once",
		Args:  exactly(0, apikeyUsage),
		RunE:  func(c *cobra.Command, _ []string) error { return a.createAPIKey(c.Context(), o) },
	}
	f := create.Flags()
	f.BoolVar(&o.worker, "worker", false, "make a worker credential (for helmr worker's HELMR_WORKER_TOKEN) instead of an API key")
	f.StringVar(&o.grants, "grant", "", "comma-separated grants: "+grantNames())
	f.StringVar(&o.expires, "expires", "", "lifetime: days (30d), hours (12h) or minutes (90m); default: none")
	f.StringVar(&o.name, "name", "", "a name to recognise the key by (letters, digits, '.', '_', '-')")
	f.BoolVar(&o.e2b, "e2b", false, "print the key as E2B's tools expect one (e2b_ and hex); the same key, either spelling works")
	return parent(&cobra.Command{
		Use:     "apikey COMMAND",
		Short:   "make, list and revoke API keys and worker credentials (owner credential only)",
		GroupID: "admin",
	}, apikeyUsage, a.api(create),
		a.api(&cobra.Command{Use: "list", Short: "list API keys and worker credentials (never the keys)", Args: exactly(0, "usage: helmr apikey list"),
			RunE: func(c *cobra.Command, _ []string) error { return a.listAPIKeys(c.Context()) }}),
		a.api(&cobra.Command{Use: "revoke ID", Short: "revoke an API key or worker credential", Args: exactly(1, "usage: helmr apikey revoke ID"),
			RunE: func(c *cobra.Command, args []string) error { return a.revokeAPIKey(c.Context(), args[0]) }}),
	)
}

// apikeyOptions are helmr apikey create's flags.
type apikeyOptions struct {
	grants, expires, name string
	worker, e2b           bool
}

func (a *App) createAPIKey(ctx context.Context, o apikeyOptions) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if o.worker {
		if o.e2b {
			return errors.New("helmr apikey create: --e2b spells an API key; a worker credential has one spelling")
		}
		return createWorkerCredential(ctx, a, c, o.grants, o.name, o.expires)
	}
	if o.grants == "" {
		return errors.New("usage: helmr apikey create --env ENV --grant G1,G2 [--expires 30d] [--name NAME] (grants: " + grantNames() + ")")
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	list := strings.Split(o.grants, ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	k, key, err := c.CreateAPIKey(ctx, apikeys.CreateRequest{Project: a.cfg.Project, Env: a.cfg.Env, Name: o.name, Grants: list, ExpiresIn: o.expires, E2B: o.e2b})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]any{"key": key, "apiKey": k})
	}
	fmt.Fprintf(a.Stderr, "API key %s for %s/%s with %s%s. It is shown this once: Helmr keeps only its hash.\n",
		k.ID, k.Project, k.Env, joinGrants(k.Grants), expiry(k))
	fmt.Fprintln(a.Stdout, key)
	return nil
}

func (a *App) listAPIKeys(ctx context.Context) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	ks, err := c.ListAPIKeys(ctx)
	if err != nil {
		return err
	}
	if a.json {
		if ks == nil {
			ks = []apikeys.Key{}
		}
		return a.printJSON(ks)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tNAME\tPROJECT/ENV\tGRANTS\tCREATED\tEXPIRES\tREVOKED\tLAST USED")
	for _, k := range ks {
		scope, grants := k.Project+"/"+k.Env, joinGrants(k.Grants)
		if k.Kind == apikeys.KindWorker {
			scope, grants = "-", "(leases runs)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Kind, or(k.Name, "-"), scope, grants,
			when(&k.CreatedAt), when(k.ExpiresAt), when(k.RevokedAt), when(k.LastUsedAt))
	}
	return tw.Flush()
}

func (a *App) revokeAPIKey(ctx context.Context, id string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	k, err := c.RevokeAPIKey(ctx, id)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(k)
	}
	fmt.Fprintf(a.Stdout, "API key %s revoked\n", k.ID)
	return nil
}

// createWorkerCredential is apikey create --worker.
func createWorkerCredential(ctx context.Context, a *App, c *client.Client, grants, name, expires string) error {
	if grants != "" {
		return errors.New("usage: helmr apikey create --worker [--expires 30d] [--name NAME] (a worker credential has no grants)")
	}
	k, key, err := c.CreateWorkerCredential(ctx, apikeys.CreateWorkerRequest{Name: name, ExpiresIn: expires})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]any{"key": key, "apiKey": k})
	}
	fmt.Fprintf(a.Stderr, "worker credential %s%s: give it to helmr worker as HELMR_WORKER_TOKEN. It is shown this once: Helmr keeps only its hash.\n", k.ID, expiry(k))
	fmt.Fprintln(a.Stdout, key)
	return nil
}

func grantNames() string {
	s := make([]string, len(apikeys.Grants))
	for i, g := range apikeys.Grants {
		s[i] = string(g)
	}
	return strings.Join(s, ", ")
}

func joinGrants(gs []apikeys.Grant) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = string(g)
	}
	return strings.Join(s, ",")
}

func expiry(k apikeys.Key) string {
	if k.ExpiresAt == nil {
		return ", no expiry"
	}
	return ", expiring " + when(k.ExpiresAt)
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
