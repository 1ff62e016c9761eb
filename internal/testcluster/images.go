package testcluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// The node has no registry to pull from (and must not reach one), so its
// images are built here from static binaries and imported into
// containerd: an OCI image layout in a tar, one uncompressed layer, which
// is what `ctr images import` takes.

// imageFile is one entry of an image's only layer.
type imageFile struct {
	Path string // absolute, inside the image
	Mode int64  // permission bits; a directory when Dir
	Dir  bool
	Link string // symlink target, when set
	Data []byte
}

const (
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    map[string]string `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// writeOCIArchive writes an OCI image layout tar holding one image called
// ref (for example registry.k8s.io/pause:3.10) to out.
func writeOCIArchive(out, ref string, files []imageFile, entrypoint, cmd []string) error {
	layer, err := layerTar(files)
	if err != nil {
		return err
	}
	layerDesc := desc(mediaTypeLayer, layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Cmd":        cmd,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := desc(mediaTypeConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := desc(mediaTypeManifest, manifest)
	manifestDesc.Platform = map[string]string{"architecture": "amd64", "os": "linux"}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          ref, // the name ctr gives the imported image
		"org.opencontainers.image.ref.name": tag,
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []descriptor{manifestDesc}})
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blobs := []struct {
		d    descriptor
		data []byte
	}{{layerDesc, layer}, {configDesc, config}, {manifestDesc, manifest}}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	for _, b := range blobs {
		if err := add("blobs/sha256/"+strings.TrimPrefix(b.d.Digest, "sha256:"), b.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("failed to write image %s: %w", out, err)
	}
	return nil
}

func desc(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// layerTar makes a reproducible layer: sorted entries, root-owned, mtime 0,
// every parent directory present.
func layerTar(files []imageFile) ([]byte, error) {
	entries := map[string]imageFile{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			continue
		}
		entries[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = imageFile{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := entries[n]
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), Mode: f.Mode, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, bytes.NewReader(f.Data)); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// busyboxApplets are linked to /bin/busybox in the probe image: enough for
// a shell, the commands tests run and what `kubectl exec` users expect.
var busyboxApplets = []string{"sh", "cat", "echo", "env", "id", "ip", "ls", "nc", "ping", "ps", "sleep", "true", "false", "wget", "hostname"}

// probeImageFiles is the probe image: the static sforge-probe at
// /sforge-probe and a static busybox.
func probeImageFiles(probe, busybox string) ([]imageFile, error) {
	p, err := os.ReadFile(probe)
	if err != nil {
		return nil, fmt.Errorf("failed to read the probe binary: %w", err)
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("failed to read busybox: %w", err)
	}
	files := []imageFile{
		{Path: "/sforge-probe", Mode: 0o755, Data: p},
		{Path: "/bin/busybox", Mode: 0o755, Data: bb},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\n")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/root", Dir: true, Mode: 0o700},
	}
	for _, a := range busyboxApplets {
		files = append(files, imageFile{Path: "/bin/" + a, Link: "busybox"})
	}
	return files, nil
}
