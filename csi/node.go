// The Node service: one feedfs mount per (source, options, secrets) on the
// node, shared by every pod that publishes it, bind-mounted read-only into
// each pod's target path once it answers, unmounted when the last pod leaves.
//
// DESIGN
// A volume's key is an HMAC-SHA-256 over its source, its options and its
// secrets, keyed by a random salt kept in STATE/key-salt (so that a weak
// password cannot be guessed offline from a key seen in a log or a path):
// two pods with the same attributes and credentials share one mount and one
// block cache; a pod with other credentials gets its own mount, so it never
// reads through another workload's credentials. The mount lives at
// STATE/mounts/KEY, made by mount.feedfs (the fstab mapping of feedfs's own
// option table: an unknown option fails there, before anything starts), which
// returns only once feedfs answers. Publications are bind mounts of it; who
// still uses a mount is read from the kernel's mount table (mountinfo.go), so
// the plugin keeps no state and can be restarted at any time: the feedfs
// daemons, under their keepers, are not its children.
//
// Locks: one mutex per key, held across mounting, binding and the last
// unmount, so a pod that publishes a volume while its mount is starting waits
// for that mount instead of starting a second one or binding an empty
// directory, and an unpublish never unmounts under a publish of the same key.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/ioutil"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Keys a nodePublishSecretRef Secret may hold: feedfs's credential
// variables, and mountpoint-s3's names for the AWS ones.
var secretEnv = map[string]string{
	"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
	"AWS_SESSION_TOKEN": "AWS_SESSION_TOKEN",
	"OSS_ACCESS_KEY_ID": "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET": "OSS_ACCESS_KEY_SECRET",
	"OSS_SECURITY_TOKEN":              "OSS_SECURITY_TOKEN",
	"ALIBABA_CLOUD_ACCESS_KEY_ID":     "ALIBABA_CLOUD_ACCESS_KEY_ID",
	"ALIBABA_CLOUD_ACCESS_KEY_SECRET": "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
	"ALIBABA_CLOUD_SECURITY_TOKEN":    "ALIBABA_CLOUD_SECURITY_TOKEN",
	"key_id":                          "AWS_ACCESS_KEY_ID", "access_key": "AWS_SECRET_ACCESS_KEY",
	"session_token": "AWS_SESSION_TOKEN",
}

// Options naming a path or a port on the node: an inline volume's attributes
// come from whoever may create a pod, so they may not use them (a PV's,
// written by the cluster's admin, may).
var nodeOptions = map[string]bool{
	"cache_dir": true, "log_file": true, "ca_bundle": true, "metrics_addr": true,
	"cache_clear": true, "profile": true,
}

const answerTimeout = 10 * time.Second

type node struct {
	salt      []byte // the key's HMAC key (loadSalt)
	id        string
	stateDir  string // STATE: mounts/KEY, logs/KEY.log
	cacheRoot string // "": no cache unless the volume names one
	helper    string // mount.feedfs
	mountinfo string
	mu        sync.Mutex
	keyLocks  map[string]*sync.Mutex
}

func (n *node) lockKey(key string) func() {
	n.mu.Lock()
	l := n.keyLocks[key]
	if l == nil {
		l = &sync.Mutex{}
		n.keyLocks[key] = l
	}
	n.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (n *node) mountsDir() string { return filepath.Join(n.stateDir, "mounts") }

// loadSalt reads STATE/key-salt, making it (32 random bytes, mode 0600) the
// first time: the same on every start, so that a restarted plugin finds the
// mounts of its predecessor under the same keys.
func (n *node) loadSalt() error {
	path := filepath.Join(n.stateDir, "key-salt")
	salt, err := ioutil.ReadFile(path)
	if err == nil && len(salt) == 32 {
		n.salt = salt
		return nil
	}
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	salt = make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return err
	}
	tmp := path + ".new"
	if err := ioutil.WriteFile(tmp, salt, 0600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	n.salt = salt
	return nil
}

// volume is what a publish request asks for, checked.
type volume struct {
	source string
	opts   []string // fstab-style, as given (names and values)
	names  []string // option names only, for the log
	env    map[string]string
	key    string
	inline bool
}

func invalid(format string, a ...interface{}) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

// parseVolume turns volume_context, the mount flags and the secrets into a
// volume, or an INVALID_ARGUMENT error that names what is wrong (never a
// secret's value).
func parseVolume(vc map[string]string, flags []string, secrets map[string]string, salt []byte) (*volume, error) {
	v := &volume{env: map[string]string{}, inline: vc["csi.storage.k8s.io/ephemeral"] == "true"}
	v.source = vc["source"]
	if v.source == "" {
		return nil, invalid("volume attribute 'source' is required (s3://BUCKET/PREFIX, oss://..., gs://...)")
	}
	if !strings.HasPrefix(v.source, "s3://") && !strings.HasPrefix(v.source, "oss://") &&
		!strings.HasPrefix(v.source, "gs://") {
		return nil, invalid("volume attribute 'source' must be an s3://, oss:// or gs:// URL, not '%s'", v.source)
	}
	keys := make([]string, 0, len(vc))
	for k := range vc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// "csi.storage.k8s.io/pod.name" and the like are kubelet's, not options.
		if k == "source" || strings.Contains(k, "/") {
			continue
		}
		// The key becomes an option name in mount.feedfs's comma list: one
		// holding ',' or '=' would smuggle in other options.
		if !optionName(k) {
			return nil, invalid("volume attribute '%s' is not a feedfs option name ([a-z0-9_-], as in fstab)", k)
		}
		val := vc[k]
		switch strings.ToLower(val) {
		case "false":
			continue
		case "true", "":
			v.opts = append(v.opts, k)
		default:
			if strings.ContainsAny(val, "\"\n") {
				return nil, invalid("volume attribute '%s': a value may not hold '\"' or a newline", k)
			}
			if strings.Contains(val, ",") {
				val = `"` + val + `"`
			}
			v.opts = append(v.opts, k+"="+val)
		}
		v.names = append(v.names, k)
	}
	for _, f := range flags {
		if strings.ContainsAny(f, "\n") {
			return nil, invalid("mount flag with a newline")
		}
		if f == "" {
			continue
		}
		v.opts = append(v.opts, f)
		for _, one := range strings.Split(f, ",") {
			v.names = append(v.names, strings.SplitN(one, "=", 2)[0])
		}
	}
	if v.inline {
		for _, name := range v.names {
			if nodeOptions[strings.ReplaceAll(name, "-", "_")] {
				return nil, invalid("option '%s' names a node path or port: not allowed in an inline volume (use a PersistentVolume)", name)
			}
		}
	}
	skeys := make([]string, 0, len(secrets))
	for k := range secrets {
		skeys = append(skeys, k)
	}
	sort.Strings(skeys)
	for _, k := range skeys {
		env, ok := secretEnv[k]
		if !ok {
			return nil, invalid("secret key '%s' is not one feedfs-csi knows (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, the OSS_ and ALIBABA_CLOUD_ equivalents, or key_id, access_key, session_token)", k)
		}
		v.env[env] = secrets[k]
	}
	h := hmac.New(sha256.New, salt)
	fmt.Fprintf(h, "feedfs-csi volume\x00%s\x00", v.source)
	for _, o := range v.opts {
		fmt.Fprintf(h, "o\x00%s\x00", o)
	}
	for _, k := range skeys {
		fmt.Fprintf(h, "s\x00%s\x00%s\x00", secretEnv[k], secrets[k])
	}
	v.key = hex.EncodeToString(h.Sum(nil))[:32]
	return v, nil
}

func optionName(k string) bool {
	if k == "" || k[0] < 'a' || k[0] > 'z' {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// environ is the node's environment with the volume's credentials on top;
// a Secret's keys replace every static key of the node's, so that a key of
// one and a token of the other are never mixed.
func (v *volume) environ() []string {
	var out []string
	drop := map[string]bool{}
	if len(v.env) > 0 {
		for _, e := range secretEnv {
			drop[e] = true
		}
	}
	for _, kv := range os.Environ() {
		if !drop[strings.SplitN(kv, "=", 2)[0]] {
			out = append(out, kv)
		}
	}
	for k, val := range v.env {
		out = append(out, k+"="+val)
	}
	return out
}

// optString is the -o argument of mount.feedfs for the volume's mount.
func (n *node) optString(v *volume) string {
	opts := append([]string{}, v.opts...)
	has := func(name string) bool {
		for _, nm := range v.names {
			if strings.ReplaceAll(nm, "-", "_") == name {
				return true
			}
		}
		return false
	}
	// Pods run as any uid: the mount is made by root for all of them.
	if !has("allow_other") {
		opts = append(opts, "allow_other")
	}
	if n.cacheRoot != "" && !has("cache_dir") {
		opts = append(opts, "cache_dir="+filepath.Join(n.cacheRoot, v.key))
	}
	if !has("log_file") {
		opts = append(opts, "log_file="+filepath.Join(n.stateDir, "logs", v.key+".log"))
	}
	return strings.Join(opts, ",")
}

// runHelper runs mount.feedfs; its output goes to a file, not a pipe, since
// the feedfs daemon it starts outlives it.
func (n *node) runHelper(env []string, args ...string) (string, error) {
	out, err := ioutil.TempFile("", "feedfs-csi-helper-")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.Command(n.helper, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Run()
	msg, _ := ioutil.ReadFile(out.Name())
	return strings.TrimSpace(string(msg)), err
}

// answers asks the file system at dir for its statfs, within answerTimeout
// (a FUSE mount whose server hangs would block the caller forever). statfs,
// not stat: the kernel answers a stat of the root from its attribute cache
// even when the server is gone; a statfs always reaches the server.
func answers(dir string) error {
	done := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		done <- syscall.Statfs(dir, &st)
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(answerTimeout):
		return syscall.ETIMEDOUT
	}
}

func (n *node) table() ([]mountEntry, error) {
	tab, err := parseMountinfo(n.mountinfo)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "cannot read %s: %v", n.mountinfo, err)
	}
	return tab, nil
}

// ensureMount makes the volume's feedfs mount answer at STATE/mounts/KEY,
// mounting it if it is not there or dead. The key lock is held.
func (n *node) ensureMount(v *volume, base string) (mountEntry, error) {
	tab, err := n.table()
	if err != nil {
		return mountEntry{}, err
	}
	if m, ok := mountAt(tab, base); ok {
		err := answers(base)
		if err == nil {
			return m, nil
		}
		if err == syscall.ETIMEDOUT {
			return mountEntry{}, status.Errorf(codes.Unavailable, "the feedfs mount of %s does not answer", v.source)
		}
		// ENOTCONN: its server and keeper are gone. Pods bound to it
		// stay on the dead mount; new ones get a new mount.
		log.Printf("mount %s is dead (%v): mounting again", base, err)
		syscall.Unmount(base, syscall.MNT_DETACH)
	}
	if err := os.MkdirAll(base, 0755); err != nil {
		return mountEntry{}, status.Errorf(codes.Internal, "mkdir %s: %v", base, err)
	}
	if err := os.MkdirAll(filepath.Join(n.stateDir, "logs"), 0700); err != nil {
		return mountEntry{}, status.Errorf(codes.Internal, "mkdir logs: %v", err)
	}
	log.Printf("mounting %s at %s (options: %s)", v.source, base, strings.Join(v.names, " "))
	msg, err := n.runHelper(v.environ(), v.source, base, "-o", n.optString(v))
	if err != nil {
		os.Remove(base)
		return mountEntry{}, status.Errorf(codes.Internal, "feedfs could not mount %s: %s", v.source, msg)
	}
	if err := answers(base); err != nil {
		return mountEntry{}, status.Errorf(codes.Unavailable, "feedfs mounted %s but the mount does not answer: %v", v.source, err)
	}
	tab, err = n.table()
	if err != nil {
		return mountEntry{}, err
	}
	m, ok := mountAt(tab, base)
	if !ok {
		return mountEntry{}, status.Errorf(codes.Internal, "mount.feedfs succeeded but %s is not a mount point", base)
	}
	log.Printf("mounted %s at %s", v.source, base)
	return m, nil
}

// checkVolumeTarget: what publish and unpublish both require of a request, a
// volume id and an absolute target path (INVALID_ARGUMENT otherwise).
func checkVolumeTarget(volumeID, targetPath string) error {
	if volumeID == "" {
		return invalid("volume_id is required")
	}
	if targetPath == "" {
		return invalid("target_path is required")
	}
	if !filepath.IsAbs(targetPath) {
		return invalid("target_path '%s' is not an absolute path", targetPath)
	}
	return nil
}

func (n *node) publish(ctx context.Context, r *publishRequest) (interface{}, error) {
	if err := checkVolumeTarget(r.volumeID, r.targetPath); err != nil {
		return nil, err
	}
	if r.capability == nil {
		return nil, invalid("volume_capability is required")
	}
	if r.capability.block {
		return nil, invalid("feedfs volumes are file systems: block access is not supported")
	}
	if !r.capability.mount {
		return nil, invalid("volume_capability has no access type (mount)")
	}
	if !r.capability.hasMode {
		return nil, invalid("volume_capability.access_mode is required")
	}
	target := filepath.Clean(r.targetPath)
	v, err := parseVolume(r.volumeContext, r.capability.mountFlags, r.secrets, n.salt)
	if err != nil {
		return nil, err
	}
	log.Printf("publish volume %s at %s: source %s, key %s, secret keys %d", r.volumeID, target,
		v.source, v.key, len(v.env))
	base := filepath.Join(n.mountsDir(), v.key)
	// The options against feedfs's own table, before taking the key lock:
	// a bad one is the caller's error, and costs no mount.
	if msg, err := n.runHelper(os.Environ(), "-f", v.source, base, "-o", n.optString(v)); err != nil {
		if _, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimPrefix(msg, "mount.feedfs: ")
			return nil, invalid("%s", msg)
		}
		return nil, status.Errorf(codes.FailedPrecondition, "cannot run %s: %v", n.helper, err)
	}
	unlock := n.lockKey(v.key)
	defer unlock()
	tab, err := n.table()
	if err != nil {
		return nil, err
	}
	if cur, bound := mountAt(tab, target); bound {
		if m, ok := mountAt(tab, base); ok && m.dev == cur.dev {
			return emptyResponse{}, nil // published already: the same answer
		}
		// Checked before mounting: a refused publish leaves no mount behind.
		return nil, status.Errorf(codes.AlreadyExists, "target_path %s holds another mount (%s)", target, cur.fstype)
	}
	if _, err := n.ensureMount(v, base); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(target, 0750); err != nil {
		return nil, status.Errorf(codes.Internal, "mkdir %s: %v", target, err)
	}
	if err := syscall.Mount(base, target, "", syscall.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind %s on %s: %v", base, target, err)
	}
	// Read-only whatever the request says: feedfs is read-only.
	err = syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|
		syscall.MS_NOSUID|syscall.MS_NODEV, "")
	if err != nil {
		syscall.Unmount(target, 0)
		return nil, status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
	}
	log.Printf("published volume %s at %s", r.volumeID, target)
	return emptyResponse{}, nil
}

// users counts the mounts of dev other than the volume's own mount at base.
func users(tab []mountEntry, dev, base string) int {
	seen := map[string]bool{}
	for _, m := range tab {
		if m.dev == dev && m.point != base {
			seen[m.point] = true
		}
	}
	return len(seen)
}

func unmount(dir string) error {
	err := syscall.Unmount(dir, 0)
	if err == syscall.EBUSY {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	return err
}

func (n *node) unpublish(ctx context.Context, r *unpublishRequest) (interface{}, error) {
	if err := checkVolumeTarget(r.volumeID, r.targetPath); err != nil {
		return nil, err
	}
	target := filepath.Clean(r.targetPath)
	tab, err := n.table()
	if err != nil {
		return nil, err
	}
	cur, bound := mountAt(tab, target)
	if !bound {
		// Not published (any more): the same answer as for the first call.
		if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
			return nil, status.Errorf(codes.Internal, "remove %s: %v", target, err)
		}
		return emptyResponse{}, nil
	}
	base := ""
	prefix := n.mountsDir() + "/"
	for _, m := range tab {
		if m.dev == cur.dev && strings.HasPrefix(m.point, prefix) {
			base = m.point
		}
	}
	if base != "" {
		unlock := n.lockKey(filepath.Base(base))
		defer unlock()
	}
	if err := unmount(target); err != nil && err != syscall.EINVAL {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return nil, status.Errorf(codes.Internal, "remove %s: %v", target, err)
	}
	log.Printf("unpublished volume %s from %s", r.volumeID, target)
	if base == "" {
		// A bind of a mount that is gone from STATE/mounts (it died and a
		// new one replaced it): nothing more to unmount.
		return emptyResponse{}, nil
	}
	if tab, err = n.table(); err != nil {
		return nil, err
	}
	if left := users(tab, cur.dev, base); left > 0 {
		log.Printf("mount %s: %d publication(s) left", base, left)
		return emptyResponse{}, nil
	}
	if err := unmount(base); err != nil && err != syscall.EINVAL {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", base, err)
	}
	os.Remove(base)
	log.Printf("unmounted %s: its last publication left", base)
	return emptyResponse{}, nil
}

func (n *node) stats(ctx context.Context, r *statsRequest) (interface{}, error) {
	if r.volumeID == "" {
		return nil, invalid("volume_id is required")
	}
	if r.volumePath == "" {
		return nil, invalid("volume_path is required")
	}
	tab, err := n.table()
	if err != nil {
		return nil, err
	}
	if _, ok := mountAt(tab, filepath.Clean(r.volumePath)); !ok {
		return nil, status.Errorf(codes.NotFound, "volume_path %s is not mounted", r.volumePath)
	}
	done := make(chan error, 1)
	var st syscall.Statfs_t
	go func() { done <- syscall.Statfs(r.volumePath, &st) }()
	select {
	case err = <-done:
	case <-time.After(answerTimeout):
		err = syscall.ETIMEDOUT
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", r.volumePath, err)
	}
	bs := int64(st.Bsize)
	return statsResponse{usage: []volumeUsage{
		{available: int64(st.Bavail) * bs, total: int64(st.Blocks) * bs,
			used: int64(st.Blocks-st.Bfree) * bs, unit: unitBytes},
		{available: int64(st.Ffree), total: int64(st.Files),
			used: int64(st.Files - st.Ffree), unit: unitInodes},
	}}, nil
}
