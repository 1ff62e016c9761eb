// Command sforge-hook is not implemented yet; its issue replaces this placeholder.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "sforge-hook: not implemented")
	os.Exit(1)
}
