// Package cniplugin is the chained CNI plugin behind cmd/sforge-cni: it
// installs the same rules as the OCI hook in a Pod's network namespace at
// ADD, before any container starts.
package cniplugin
