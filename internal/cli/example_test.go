package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/internal/cli"
)

// Main runs a command line in process, as cmd/sluice does: here sluice try,
// two requests a second in a fixed window, against one every 300 ms.
func ExampleMain() {
	code := cli.Main(context.Background(), []string{"try", "--algorithm", "fixed_window", "--quota", "2", "--window", "1s", "--requests", "4", "--every", "300ms"}, os.Stdout, os.Stderr)
	fmt.Println("exit", code)
	// Output:
	// try: fixed_window 2 per 1s; 4 requests of cost 1, one every 300ms
	//
	//       t  decision  remaining  retry after  reset after  delay
	//      0s     allow          1            -           1s     0s
	//   300ms     allow          0            -        700ms     0s
	//   600ms    reject          0        400ms        400ms     0s
	//   900ms    reject          0        100ms        100ms     0s
	//
	// 2 of 4 allowed
	// exit 0
}

// A usage error says what was wrong in its first line, then where the help
// is; the exit code is 2.
func ExampleMain_usageError() {
	code := cli.Main(context.Background(), []string{"serve", "--confg", "edge.yaml"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	// Output:
	// sluice serve: unknown flag: --confg
	// Run 'sluice serve --help' for usage.
	// exit 2
}
