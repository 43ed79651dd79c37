// Command sluice is the sluice rate limiter's command line: see
// `sluice help`.
package main

import (
	"os"

	"github.com/sluicehq/sluice/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
