// The CSI v1 messages feedfs-csi speaks, written from the spec's csi.proto
// (github.com/container-storage-interface/spec): the comment on each field
// is its number there. Requests are read (unmarshal), responses written
// (marshal); the codec below hands them to gRPC.
package main

import "fmt"

type unmarshaler interface{ unmarshal(b []byte) error }

// codec is the gRPC codec of the server: our own messages in, out.
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) {
	m, ok := v.(marshaler)
	if !ok {
		return nil, fmt.Errorf("feedfs-csi: cannot marshal %T", v)
	}
	return m.marshal(), nil
}

func (codec) Unmarshal(data []byte, v interface{}) error {
	m, ok := v.(unmarshaler)
	if !ok {
		return fmt.Errorf("feedfs-csi: cannot unmarshal into %T", v)
	}
	return m.unmarshal(data)
}

func (codec) String() string { return "proto" }
func (codec) Name() string   { return "proto" }

// emptyRequest stands for every request without fields we read
// (GetPluginInfo, GetPluginCapabilities, Probe, NodeGetInfo,
// NodeGetCapabilities); unknown fields are skipped.
type emptyRequest struct{}

func (*emptyRequest) unmarshal(b []byte) error { return fields(b, func(field) error { return nil }) }

type emptyResponse struct{}

func (emptyResponse) marshal() []byte { return nil }

// GetPluginInfoResponse: name = 1, vendor_version = 2, manifest = 3.
type pluginInfo struct {
	name, version string
	manifest      map[string]string
}

func (m pluginInfo) marshal() []byte {
	var e encoder
	e.string(1, m.name)
	e.string(2, m.version)
	e.stringMap(3, m.manifest)
	return e.b
}

// GetPluginCapabilitiesResponse: repeated PluginCapability capabilities = 1.
// A node-only plugin has no CONTROLLER_SERVICE: none to report.
type pluginCaps struct{}

func (pluginCaps) marshal() []byte { return nil }

// ProbeResponse: google.protobuf.BoolValue ready = 1 (BoolValue: bool value = 1).
type probeResponse struct{ ready bool }

func (m probeResponse) marshal() []byte {
	var v, e encoder
	v.bool(1, m.ready)
	e.bytes(1, v.b)
	return e.b
}

// NodeGetInfoResponse: node_id = 1, max_volumes_per_node = 2 (0: no limit),
// accessible_topology = 3 (none: every node reaches the object store alike).
type nodeInfo struct{ nodeID string }

func (m nodeInfo) marshal() []byte {
	var e encoder
	e.string(1, m.nodeID)
	return e.b
}

// NodeServiceCapability.RPC.Type values.
const (
	rpcGetVolumeStats = 2
)

// NodeGetCapabilitiesResponse: repeated NodeServiceCapability capabilities = 1;
// NodeServiceCapability: oneof type { RPC rpc = 1 }; RPC: Type type = 1.
type nodeCaps struct{ rpcs []uint64 }

func (m nodeCaps) marshal() []byte {
	var e encoder
	for _, t := range m.rpcs {
		var rpc, cap encoder
		rpc.uint(1, t)
		cap.bytes(1, rpc.b)
		e.bytes(1, cap.b)
	}
	return e.b
}

// VolumeCapability: oneof access_type { BlockVolume block = 1; MountVolume
// mount = 2 }, AccessMode access_mode = 3. MountVolume: fs_type = 1,
// repeated mount_flags = 2, volume_mount_group = 3. AccessMode: Mode mode = 1.
type volumeCapability struct {
	block, mount bool
	fsType       string
	mountFlags   []string
	hasMode      bool
	mode         uint64
}

func (c *volumeCapability) unmarshal(b []byte) error {
	return fields(b, func(f field) error {
		switch f.num {
		case 1:
			c.block, c.mount = true, false
			_, err := f.asMessage()
			return err
		case 2:
			c.block, c.mount = false, true
			mb, err := f.asMessage()
			if err != nil {
				return err
			}
			return fields(mb, func(g field) error {
				var err error
				var s string
				switch g.num {
				case 1:
					c.fsType, err = g.asString()
				case 2:
					s, err = g.asString()
					c.mountFlags = append(c.mountFlags, s)
				}
				return err
			})
		case 3:
			c.hasMode = true
			ab, err := f.asMessage()
			if err != nil {
				return err
			}
			return fields(ab, func(g field) error {
				var err error
				if g.num == 1 {
					c.mode, err = g.asVarint()
				}
				return err
			})
		}
		return nil
	})
}

// NodePublishVolumeRequest: volume_id = 1, publish_context = 2,
// staging_target_path = 3, target_path = 4, volume_capability = 5,
// readonly = 6, secrets = 7, volume_context = 8.
type publishRequest struct {
	volumeID, stagingPath, targetPath string
	publishContext                    map[string]string
	capability                        *volumeCapability
	readonly                          bool
	secrets                           map[string]string // never logged
	volumeContext                     map[string]string
}

func (r *publishRequest) unmarshal(b []byte) error {
	r.publishContext = map[string]string{}
	r.secrets = map[string]string{}
	r.volumeContext = map[string]string{}
	return fields(b, func(f field) error {
		var err error
		var v uint64
		switch f.num {
		case 1:
			r.volumeID, err = f.asString()
		case 2:
			err = f.mapEntry(r.publishContext)
		case 3:
			r.stagingPath, err = f.asString()
		case 4:
			r.targetPath, err = f.asString()
		case 5:
			var cb []byte
			if cb, err = f.asMessage(); err == nil {
				if r.capability == nil {
					r.capability = &volumeCapability{}
				}
				err = r.capability.unmarshal(cb)
			}
		case 6:
			v, err = f.asVarint()
			r.readonly = v != 0
		case 7:
			err = f.mapEntry(r.secrets)
		case 8:
			err = f.mapEntry(r.volumeContext)
		}
		return err
	})
}

// NodeUnpublishVolumeRequest: volume_id = 1, target_path = 2.
type unpublishRequest struct{ volumeID, targetPath string }

func (r *unpublishRequest) unmarshal(b []byte) error {
	return fields(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			r.volumeID, err = f.asString()
		case 2:
			r.targetPath, err = f.asString()
		}
		return err
	})
}

// NodeGetVolumeStatsRequest: volume_id = 1, volume_path = 2, staging_target_path = 3.
type statsRequest struct{ volumeID, volumePath string }

func (r *statsRequest) unmarshal(b []byte) error {
	return fields(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			r.volumeID, err = f.asString()
		case 2:
			r.volumePath, err = f.asString()
		}
		return err
	})
}

// VolumeUsage.Unit values.
const (
	unitBytes  = 1
	unitInodes = 2
)

// VolumeUsage: available = 1, total = 2, used = 3, Unit unit = 4.
type volumeUsage struct {
	available, total, used int64
	unit                   uint64
}

// NodeGetVolumeStatsResponse: repeated VolumeUsage usage = 1.
type statsResponse struct{ usage []volumeUsage }

func (m statsResponse) marshal() []byte {
	var e encoder
	for _, u := range m.usage {
		var ue encoder
		ue.int64(1, u.available)
		ue.int64(2, u.total)
		ue.int64(3, u.used)
		ue.uint(4, u.unit)
		e.bytes(1, ue.b)
	}
	return e.b
}
