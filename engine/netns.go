package engine

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/containernetworking/plugins/pkg/ns"
)

// WithNetNS runs fn on an OS thread that has entered the network namespace
// at path, and returns fn's error. Everything fn does on that thread —
// netlink sockets it opens, /proc/sys/net files it writes, processes it
// starts — happens in the namespace; goroutines fn starts do not (see the
// CNI ns package's README).
//
// A path that does not exist, or no longer holds a namespace (an unmounted
// bind mount, the /proc entry of an exited process), gives an error
// wrapping ErrNetNSGone.
func WithNetNS(path string, fn func() error) error {
	n, err := ns.GetNS(path)
	if err != nil {
		var notExist ns.NSPathNotExistErr
		var notNS ns.NSPathNotNSErr
		// fs.ErrNotExist: the process exited between the check and the open.
		if errors.As(err, &notExist) || errors.As(err, &notNS) || errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNetNSGone, path)
		}
		return fmt.Errorf("failed to open network namespace %s: %w", path, err)
	}
	defer n.Close()
	return n.Do(func(ns.NetNS) error { return fn() })
}
