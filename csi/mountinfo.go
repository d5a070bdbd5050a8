// The kernel's mount table, read from /proc/self/mountinfo. feedfs-csi keeps
// no state of its own about who publishes what: a publication is a bind
// mount of the volume's feedfs mount, so it has the same device number, and
// counting the table's entries with that device tells whether any pod still
// uses a mount. That survives a restart of the plugin for free.
package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

type mountEntry struct {
	dev    string // "major:minor"
	point  string
	fstype string
}

// unescape undoes mountinfo's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseMountinfo reads the table; a line it cannot read is skipped.
func parseMountinfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		sep := -1
		for i := 6; i < len(fs); i++ {
			if fs[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fs) {
			continue
		}
		out = append(out, mountEntry{dev: fs[2], point: unescape(fs[4]), fstype: fs[sep+1]})
	}
	return out, sc.Err()
}

// mountAt is the entry mounted last at point (the one on top), if any.
func mountAt(tab []mountEntry, point string) (mountEntry, bool) {
	var e mountEntry
	found := false
	for _, m := range tab {
		if m.point == point {
			e, found = m, true
		}
	}
	return e, found
}
