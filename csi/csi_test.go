package main

import (
	"strings"
	"testing"
)

// A NodePublishVolumeRequest as kubelet sends it, written field by field
// with the spec's numbers, read back.
func TestPublishRequestWire(t *testing.T) {
	var mount, mode, capb, e encoder
	mount.string(1, "ext4")
	mount.string(2, "region=eu-west-1")
	mount.string(2, "force_path_style")
	mode.uint(1, 3)
	capb.message(2, rawMsg(mount.b))
	capb.message(3, rawMsg(mode.b))
	e.string(1, "vol-1")
	e.string(4, "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/d/mount")
	e.message(5, rawMsg(capb.b))
	e.bool(6, true)
	e.stringMap(7, map[string]string{"key_id": "AK", "access_key": "SK"})
	e.stringMap(8, map[string]string{"source": "s3://b/p/"})
	e.tag(99, wireFixed64) // an unknown field is skipped
	e.b = append(e.b, 1, 2, 3, 4, 5, 6, 7, 8)
	var r publishRequest
	if err := r.unmarshal(e.b); err != nil {
		t.Fatal(err)
	}
	c := r.capability
	if r.volumeID != "vol-1" || !strings.HasSuffix(r.targetPath, "/mount") || !r.readonly ||
		c == nil || !c.mount || c.block || c.fsType != "ext4" || !c.hasMode || c.mode != 3 ||
		len(c.mountFlags) != 2 || c.mountFlags[1] != "force_path_style" ||
		r.secrets["access_key"] != "SK" || r.volumeContext["source"] != "s3://b/p/" {
		t.Fatalf("decoded %+v cap %+v", r, c)
	}
}

type rawMsg []byte

func (m rawMsg) marshal() []byte { return m }

func TestBadWire(t *testing.T) {
	for _, b := range [][]byte{{0x0a, 0x05, 'a'}, {0x08}, {0x0b}, {0x22, 0x80}} {
		var r publishRequest
		if err := r.unmarshal(b); err == nil {
			t.Errorf("%x: accepted", b)
		}
	}
	var r publishRequest // volume_id sent as a varint: a type error
	if err := r.unmarshal([]byte{0x08, 0x01}); err == nil {
		t.Error("volume_id as varint accepted")
	}
}

func TestProbeAndCapsWire(t *testing.T) {
	if got := (probeResponse{ready: true}).marshal(); string(got) != "\x0a\x02\x08\x01" {
		t.Errorf("probe %x", got)
	}
	if got := (nodeCaps{rpcs: []uint64{2}}).marshal(); string(got) != "\x0a\x04\x0a\x02\x08\x02" {
		t.Errorf("caps %x", got)
	}
}

func TestParseVolume(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{"source": "s3://b/", "region": "us-east-1",
			"force_path_style": "true", "list_v1": "false", "csi.storage.k8s.io/pod.name": "p"}
	}
	salt := []byte("salt-1")
	v, err := parseVolume(base(), []string{"endpoint_url=http://h:9000"}, nil, salt)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(v.opts, ","); got != "force_path_style,region=us-east-1,endpoint_url=http://h:9000" {
		t.Errorf("opts %q", got)
	}
	w, _ := parseVolume(base(), []string{"endpoint_url=http://h:9000"}, map[string]string{"key_id": "A"}, salt)
	if w.key == v.key || w.env["AWS_ACCESS_KEY_ID"] != "A" {
		t.Errorf("secrets do not part the mounts: %s %s", v.key, w.key)
	}
	same, _ := parseVolume(base(), []string{"endpoint_url=http://h:9000"}, nil, salt)
	other, _ := parseVolume(base(), []string{"endpoint_url=http://h:9000"}, nil, []byte("salt-2"))
	if same.key != v.key || other.key == v.key {
		t.Errorf("keys: same salt %s vs %s, other salt %s", same.key, v.key, other.key)
	}
	bad := []struct {
		vc      map[string]string
		secrets map[string]string
		want    string
	}{
		{map[string]string{}, nil, "'source' is required"},
		{map[string]string{"source": "/etc"}, nil, "must be an s3://"},
		{map[string]string{"source": "s3://b/"}, map[string]string{"password": "x"}, "secret key 'password'"},
		{map[string]string{"source": "s3://b/", "csi.storage.k8s.io/ephemeral": "true",
			"cache_dir": "/etc"}, nil, "option 'cache_dir' names a node path"},
		{map[string]string{"source": "s3://b/", "region": "a\"b"}, nil, "may not hold"},
		{map[string]string{"source": "s3://b/", "csi.storage.k8s.io/ephemeral": "true",
			"region=x,cache_dir": "/etc"}, nil, "is not a feedfs option name"},
		{map[string]string{"source": "s3://b/", "Region": "x"}, nil, "is not a feedfs option name"},
	}
	for _, c := range bad {
		_, err := parseVolume(c.vc, nil, c.secrets, salt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.vc, err, c.want)
		}
		if err != nil && c.secrets != nil && strings.Contains(err.Error(), "x\"") {
			t.Errorf("a secret's value in %v", err)
		}
	}
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("%q", got)
	}
}
