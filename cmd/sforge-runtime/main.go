// Command sforge-runtime is not implemented yet; its issue replaces this placeholder.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "sforge-runtime: not implemented")
	os.Exit(1)
}
