package cli

import (
	"io"
	"log/slog"

	"github.com/sforge-dev/netiso/launcher"
	"github.com/sforge-dev/netiso/proxy"
)

// newAPIProxy serves `sforge run --api-proxy` with the same reverse proxy
// as `sforge proxy`, in-process.
func init() {
	newAPIProxy = func(c launcher.ProxyConfig) (launcher.APIProxy, error) {
		target, err := proxy.ParseTarget("--api-proxy target", c.Target)
		if err != nil {
			return nil, err
		}
		w := c.Log
		if w == nil {
			w = io.Discard
		}
		return proxy.New(proxy.Config{
			Target:       target,
			APIKey:       c.APIKey,
			APIKeyHeader: c.APIKeyHeader,
			AllowFrom:    c.AllowFrom,
			AwaitClients: c.AwaitClients,
			Logger:       slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}
}
