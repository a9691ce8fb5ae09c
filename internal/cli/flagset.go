package cli

import "flag"

// flagSet is a FlagSet that reports errors to the app's stderr.
type flagSet struct{ *flag.FlagSet }

func newFlagSet(a *App, name string) *flagSet {
	fs := flag.NewFlagSet("helmr "+name, flag.ContinueOnError)
	fs.SetOutput(a.Stderr)
	return &flagSet{fs}
}
