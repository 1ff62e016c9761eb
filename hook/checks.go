package hook

import "os"

// pathExists reports whether path exists; errors other than "does not
// exist" count as existing, so that Remove gets to report them.
func pathExists(path string) bool {
	_, err := os.Stat(path)
	return !os.IsNotExist(err)
}
