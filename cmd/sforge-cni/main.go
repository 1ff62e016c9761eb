// Command sforge-cni is not implemented yet; its issue replaces this placeholder.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "sforge-cni: not implemented")
	os.Exit(1)
}
