package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

type notFound struct{ what string }

func (e notFound) Error() string { return "No such " + e.what }
func (notFound) NotFound()       {}

// fakeAPI is a Docker daemon in memory. It records every call so tests can
// assert what was (or was not) asked of the daemon.
type fakeAPI struct {
	mu      sync.Mutex
	calls   []string
	version string
	info    system.Info
	infoErr error
	bridge  *network.Inspect

	images     map[string]bool
	buildTar   map[string]string // files of the last build context
	buildOpts  build.ImageBuildOptions
	buildOut   string // JSON message stream the build answers
	pullOut    string
	createCfg  *container.Config
	createHC   *container.HostConfig
	createName string
	createErr  error
	startErr   error
	output     []byte // what the container prints on stdout
	stderr     []byte
	exitCode   int64
	block      chan struct{} // when set, the container runs until closed
	removed    []string
	removeErr  error
	// files are the paths the container's filesystem has (nil: all of
	// them); stats are not recorded as calls.
	files   map[string]bool
	statErr error
	// inspect is what ContainerInspect answers (nil: a running container
	// at 172.17.0.2).
	inspect    *container.InspectResponse
	inspectErr error
}

func newFake(version string) *fakeAPI {
	return &fakeAPI{
		version: version,
		info: system.Info{OSType: "linux", ServerVersion: "20.10.24", Runtimes: map[string]system.RuntimeWithStatus{
			"runc": {}, RuntimeName: {Runtime: system.Runtime{Path: "/usr/local/bin/sforge-runtime"}},
		}},
		bridge: &network.Inspect{IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "172.17.0.0/16", Gateway: "172.17.0.1"}}}},
		images: map[string]bool{},
	}
}

func (f *fakeAPI) record(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }

func (f *fakeAPI) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeAPI) NegotiateAPIVersion(context.Context) { f.record("NegotiateAPIVersion") }
func (f *fakeAPI) ClientVersion() string               { return f.version }
func (f *fakeAPI) DaemonHost() string                  { return "unix:///fake/docker.sock" }
func (f *fakeAPI) Close() error                        { f.record("Close"); return nil }

func (f *fakeAPI) Info(context.Context) (system.Info, error) {
	f.record("Info")
	return f.info, f.infoErr
}

func (f *fakeAPI) NetworkInspect(_ context.Context, id string, _ network.InspectOptions) (network.Inspect, error) {
	f.record("NetworkInspect " + id)
	if f.bridge == nil {
		return network.Inspect{}, notFound{"network"}
	}
	return *f.bridge, nil
}

func (f *fakeAPI) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	f.record("ImageInspect " + ref)
	if f.images[ref] {
		return image.InspectResponse{ID: "sha256:" + ref}, nil
	}
	return image.InspectResponse{}, notFound{"image: " + ref}
}

func (f *fakeAPI) ImagePull(_ context.Context, ref string, _ image.PullOptions) (io.ReadCloser, error) {
	f.record("ImagePull " + ref)
	return io.NopCloser(bytes.NewBufferString(f.pullOut)), nil
}

func (f *fakeAPI) ImageBuild(_ context.Context, r io.Reader, o build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	f.record("ImageBuild")
	f.buildOpts = o
	f.buildTar = map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return build.ImageBuildResponse{}, err
		}
		b, _ := io.ReadAll(tr)
		f.buildTar[h.Name] = string(b)
		if h.Typeflag == tar.TypeSymlink {
			f.buildTar[h.Name] = "-> " + h.Linkname
		}
	}
	out := f.buildOut
	if out == "" {
		out = `{"stream":"Step 1/2 : FROM base\n"}` + "\n" + `{"stream":"Successfully built 0123\n"}` + "\n"
	}
	return build.ImageBuildResponse{Body: io.NopCloser(bytes.NewBufferString(out))}, nil
}

func (f *fakeAPI) ContainerCreate(ctx context.Context, cfg *container.Config, hc *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.record("ContainerCreate " + name)
	f.createCfg, f.createHC, f.createName = cfg, hc, name
	if f.createErr != nil {
		return container.CreateResponse{}, f.createErr
	}
	return container.CreateResponse{ID: "c0ffee"}, nil
}

// ContainerAttach returns a pipe that carries the container's multiplexed
// output once it is started.
func (f *fakeAPI) ContainerAttach(_ context.Context, id string, _ container.AttachOptions) (types.HijackedResponse, error) {
	f.record("ContainerAttach " + id)
	client, server := net.Pipe()
	go func() {
		<-f.started()
		w := stdcopy.NewStdWriter(server, stdcopy.Stdout)
		w.Write(f.output)
		if len(f.stderr) > 0 {
			stdcopy.NewStdWriter(server, stdcopy.Stderr).Write(f.stderr)
		}
		if f.block != nil {
			<-f.block
		}
		server.Close()
	}()
	return types.NewHijackedResponse(client, ""), nil
}

var startOnce sync.Map

func (f *fakeAPI) started() chan struct{} {
	ch, _ := startOnce.LoadOrStore(f, make(chan struct{}))
	return ch.(chan struct{})
}

func (f *fakeAPI) ContainerWait(ctx context.Context, id string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	f.record("ContainerWait " + id + " " + string(cond))
	rc, ec := make(chan container.WaitResponse, 1), make(chan error, 1)
	go func() {
		select {
		case <-f.started():
		case <-ctx.Done():
			ec <- ctx.Err()
			return
		}
		if f.block != nil {
			select {
			case <-f.block:
			case <-ctx.Done():
				ec <- ctx.Err()
				return
			}
		}
		rc <- container.WaitResponse{StatusCode: f.exitCode}
	}()
	return rc, ec
}

func (f *fakeAPI) CopyToContainer(_ context.Context, id, dst string, _ io.Reader, _ container.CopyToContainerOptions) error {
	f.record("CopyToContainer " + id + " " + dst)
	return nil
}

func (f *fakeAPI) ContainerStatPath(_ context.Context, _, p string) (container.PathStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.statErr != nil:
		return container.PathStat{}, f.statErr
	case f.files == nil || f.files[p]:
		return container.PathStat{Name: p, Mode: 0o755}, nil
	}
	return container.PathStat{}, notFound{p}
}

func (f *fakeAPI) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	f.record("ContainerStart " + id)
	if f.startErr != nil {
		return f.startErr
	}
	close(f.started())
	return nil
}

func (f *fakeAPI) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	f.record("ContainerInspect " + id)
	if f.inspectErr != nil {
		return container.InspectResponse{}, f.inspectErr
	}
	if f.inspect != nil {
		return *f.inspect, nil
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{State: &container.State{Running: true}},
		NetworkSettings:   &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{"bridge": {IPAddress: "172.17.0.2"}}},
	}, nil
}

func (f *fakeAPI) ContainerRemove(_ context.Context, id string, o container.RemoveOptions) error {
	f.record("ContainerRemove " + id)
	if !o.Force {
		return errors.New("remove without force")
	}
	f.removed = append(f.removed, id)
	return f.removeErr
}

func (f *fakeAPI) ContainerExecCreate(_ context.Context, id string, o container.ExecOptions) (container.ExecCreateResponse, error) {
	f.record("ContainerExecCreate " + id + " " + strings.Join(o.Cmd, " "))
	return container.ExecCreateResponse{ID: "exec1"}, nil
}

func (f *fakeAPI) ContainerExecAttach(_ context.Context, id string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
	f.record("ContainerExecAttach " + id)
	client, server := net.Pipe()
	go func() {
		stdcopy.NewStdWriter(server, stdcopy.Stdout).Write([]byte("exec says hi\n"))
		server.Close()
	}()
	return types.NewHijackedResponse(client, ""), nil
}

func (f *fakeAPI) ContainerExecInspect(_ context.Context, id string) (container.ExecInspect, error) {
	f.record("ContainerExecInspect " + id)
	return container.ExecInspect{ExitCode: 3}, nil
}

var _ API = (*fakeAPI)(nil)
