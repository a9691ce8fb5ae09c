// Command helmr is Helmr's CLI and its servers: dev (everything in one
// process), server (control plane) and worker.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/helmr/helmr/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
