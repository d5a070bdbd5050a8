// feedfs-csi — the CSI node plugin of feedfs (issue 37): pods declare a
// dataset as a volume (a PersistentVolume of driver csi.feedfs.io, or an
// inline ephemeral volume), and kubelet asks this plugin, over a unix socket,
// to publish it into the pod. See node.go for how mounts are shared and
// docs/DEPLOY.md, "The CSI driver", for the Kubernetes side.
//
// DESIGN
// gRPC from Debian's golang-google-grpc-dev, without generated code: the CSI
// messages are written by hand from the spec (msg.go, wire.go) and given to
// gRPC through a codec of our own; the two services are gRPC ServiceDescs
// whose handlers decode the request and call the node's method. Identity and
// Node only: there is no controller (static PVs and inline volumes need none).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var version = "dev" // set by the Makefile from FEEDFS_VERSION

const usageText = `usage: feedfs-csi --endpoint unix:///PATH/csi.sock [options]

The CSI node plugin of feedfs: kubelet publishes volumes of driver
csi.feedfs.io through it (PersistentVolumes and inline ephemeral volumes).
Each volume's attributes are 'source' (s3://, oss://, gs:// URL) and feedfs
long options with '_' for '-' (endpoint_url, region, force_path_style: "true",
...), as in fstab; a PV's mountOptions are taken the same way. Credentials:
the node's, in this process's environment, or a nodePublishSecretRef Secret
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, OSS_*,
ALIBABA_CLOUD_*, or key_id/access_key/session_token).

options:
  --endpoint URL       unix:///PATH or /PATH: the socket to serve (required)
  --node-id ID         NodeGetInfo's node id (default: $KUBE_NODE_NAME, else the host name)
  --driver-name NAME   the CSI driver name (default csi.feedfs.io)
  --state-dir DIR      feedfs mounts (DIR/mounts/KEY) and their logs (DIR/logs)
                       (default /var/lib/kubelet/plugins/csi.feedfs.io)
  --cache-root DIR     a block cache per mount in DIR/KEY (default: none, unless
                       a volume names its cache_dir)
  --mount-helper PATH  mount.feedfs to run (default: next to feedfs-csi, else
                       /sbin/mount.feedfs, else on PATH)
  -h, --help           this text
  --version            print the version and exit
`

// The services' handler type: RegisterService checks that the server
// implements it.
type csiServer interface{ csiPlugin() }

type plugin struct {
	name string
	node *node
}

func (*plugin) csiPlugin() {}

// handler wraps one RPC: decode the request into a fresh message of the
// method's type, then call fn with it.
func handler(newReq func() unmarshaler, fn func(p *plugin, ctx context.Context, req unmarshaler) (interface{}, error)) func(interface{}, context.Context, func(interface{}) error, grpc.UnaryServerInterceptor) (interface{}, error) {
	return func(srv interface{}, ctx context.Context, dec func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
		req := newReq()
		if err := dec(req); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "bad request: %v", err)
		}
		return fn(srv.(*plugin), ctx, req)
	}
}

func empty() unmarshaler { return &emptyRequest{} }

var identityService = grpc.ServiceDesc{
	ServiceName: "csi.v1.Identity",
	HandlerType: (*csiServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "GetPluginInfo", Handler: handler(empty, func(p *plugin, _ context.Context, _ unmarshaler) (interface{}, error) {
			return pluginInfo{name: p.name, version: version}, nil
		})},
		{MethodName: "GetPluginCapabilities", Handler: handler(empty, func(*plugin, context.Context, unmarshaler) (interface{}, error) {
			return pluginCaps{}, nil
		})},
		{MethodName: "Probe", Handler: handler(empty, func(p *plugin, _ context.Context, _ unmarshaler) (interface{}, error) {
			if st, err := os.Stat(p.node.helper); err != nil || st.Mode()&0111 == 0 {
				return nil, status.Errorf(codes.FailedPrecondition, "%s is not an executable", p.node.helper)
			}
			return probeResponse{ready: true}, nil
		})},
	},
	Metadata: "csi.proto",
}

var nodeService = grpc.ServiceDesc{
	ServiceName: "csi.v1.Node",
	HandlerType: (*csiServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "NodeGetInfo", Handler: handler(empty, func(p *plugin, _ context.Context, _ unmarshaler) (interface{}, error) {
			return nodeInfo{nodeID: p.node.id}, nil
		})},
		{MethodName: "NodeGetCapabilities", Handler: handler(empty, func(*plugin, context.Context, unmarshaler) (interface{}, error) {
			return nodeCaps{rpcs: []uint64{rpcGetVolumeStats}}, nil
		})},
		{MethodName: "NodePublishVolume", Handler: handler(func() unmarshaler { return &publishRequest{} },
			func(p *plugin, ctx context.Context, r unmarshaler) (interface{}, error) {
				return p.node.publish(ctx, r.(*publishRequest))
			})},
		{MethodName: "NodeUnpublishVolume", Handler: handler(func() unmarshaler { return &unpublishRequest{} },
			func(p *plugin, ctx context.Context, r unmarshaler) (interface{}, error) {
				return p.node.unpublish(ctx, r.(*unpublishRequest))
			})},
		{MethodName: "NodeGetVolumeStats", Handler: handler(func() unmarshaler { return &statsRequest{} },
			func(p *plugin, ctx context.Context, r unmarshaler) (interface{}, error) {
				return p.node.stats(ctx, r.(*statsRequest))
			})},
	},
	Metadata: "csi.proto",
}

func findHelper() string {
	if self, err := os.Executable(); err == nil {
		h := filepath.Join(filepath.Dir(self), "mount.feedfs")
		if _, err := os.Stat(h); err == nil {
			return h
		}
	}
	if _, err := os.Stat("/sbin/mount.feedfs"); err == nil {
		return "/sbin/mount.feedfs"
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		h := filepath.Join(dir, "mount.feedfs")
		if _, err := os.Stat(h); err == nil {
			return h
		}
	}
	return "mount.feedfs"
}

func die(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "feedfs-csi: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	fs := flag.NewFlagSet("feedfs-csi", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	endpoint := fs.String("endpoint", "", "")
	nodeID := fs.String("node-id", "", "")
	driver := fs.String("driver-name", "csi.feedfs.io", "")
	stateDir := fs.String("state-dir", "/var/lib/kubelet/plugins/csi.feedfs.io", "")
	cacheRoot := fs.String("cache-root", "", "")
	helper := fs.String("mount-helper", "", "")
	showVersion := fs.Bool("version", false, "")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			fmt.Print(usageText)
			return
		}
		die("%v (see feedfs-csi --help)", err)
	}
	if fs.NArg() > 0 {
		die("unexpected argument '%s' (see feedfs-csi --help)", fs.Arg(0))
	}
	if *showVersion {
		fmt.Printf("feedfs-csi %s\n", version)
		return
	}
	sock := *endpoint
	switch {
	case sock == "":
		die("--endpoint unix:///PATH/csi.sock is required")
	case strings.HasPrefix(sock, "unix://"):
		sock = strings.TrimPrefix(sock, "unix://")
	case strings.Contains(sock, "://"):
		die("--endpoint %s: only unix:// sockets are served", sock)
	}
	if !filepath.IsAbs(sock) {
		die("--endpoint %s: the socket path must be absolute", *endpoint)
	}
	if *nodeID == "" {
		*nodeID = os.Getenv("KUBE_NODE_NAME")
	}
	if *nodeID == "" {
		*nodeID, _ = os.Hostname()
	}
	if *helper == "" {
		*helper = findHelper()
	}
	log.SetFlags(0)
	log.SetPrefix("feedfs-csi: ")
	n := &node{id: *nodeID, stateDir: filepath.Clean(*stateDir), cacheRoot: *cacheRoot,
		helper: *helper, mountinfo: "/proc/self/mountinfo", keyLocks: map[string]*sync.Mutex{}}
	if err := os.MkdirAll(n.mountsDir(), 0755); err != nil {
		die("state dir: %v", err)
	}
	if err := n.loadSalt(); err != nil {
		die("state dir: key salt: %v", err)
	}
	if n.cacheRoot != "" {
		if err := os.MkdirAll(n.cacheRoot, 0700); err != nil {
			die("cache root: %v", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(sock), 0755); err != nil {
		die("socket dir: %v", err)
	}
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		die("remove the old socket %s: %v", sock, err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		die("listen on %s: %v", sock, err)
	}
	srv := grpc.NewServer(grpc.CustomCodec(codec{}))
	p := &plugin{name: *driver, node: n}
	srv.RegisterService(&identityService, p)
	srv.RegisterService(&nodeService, p)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		log.Printf("%v: stopping (mounts stay for the pods that use them)", s)
		srv.Stop()
	}()
	log.Printf("%s %s serving %s (node %s, state %s, helper %s)", *driver, version, sock, n.id, n.stateDir, n.helper)
	if err := srv.Serve(l); err != nil {
		log.Printf("serve: %v", err)
	}
	os.Remove(sock)
}
