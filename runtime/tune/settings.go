package tune

import (
	"fmt"
	"strings"

	"gocl/runtime/config"
	"gocl/runtime/wire"
)

// Settings are the user's restrictions on the tuner.
type Settings struct {
	Algos, Protos Filter
	DirectMax     int // bytes: direct is a candidate only up to here (unless it is the only one allowed)
}

// nccl's algorithms gocl does not have: accepted (an NCCL_ALGO written for
// NCCL keeps working), never chosen.
var foreignAlgos = []string{"collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"}

// FromConfig reads GOCL_ALGO, GOCL_PROTO (NCCL_ALGO, NCCL_PROTO as
// fallbacks) and GOCL_DIRECT_THRESHOLD. A malformed value is an error naming
// the variable and the fix.
func FromConfig() (Settings, error) {
	var s Settings
	var err error
	v, src := config.Source("ALGO")
	if s.Algos, err = ParseFilter(src, v, algoNames[:], foreignAlgos); err != nil {
		return s, err
	}
	v, src = config.Source("PROTO")
	if s.Protos, err = ParseFilter(src, v, protoNames[:], nil); err != nil {
		return s, err
	}
	if s.DirectMax, err = config.Int("DIRECT_THRESHOLD"); err != nil || s.DirectMax < 0 {
		return s, fmt.Errorf("GOCL_DIRECT_THRESHOLD=%q: give the largest size in bytes (0 or more) for which the one-shot direct algorithm may be chosen", config.String("DIRECT_THRESHOLD"))
	}
	return s, nil
}

func (s Settings) String() string {
	return fmt.Sprintf("algorithms %s, protocols %s", s.Algos, s.Protos)
}

// Filter is a parsed GOCL_ALGO or GOCL_PROTO: for each collective, the set
// of allowed algorithms (or protocols) as a bit mask.
type Filter struct {
	text string
	mask [numColls]uint16
}

func (f Filter) String() string {
	if f.text == "" {
		return "auto"
	}
	return f.text
}

func (f Filter) has(coll wire.Coll, bit int) bool { return f.mask[coll]&(1<<bit) != 0 }

// only reports whether i is the one thing allowed for coll.
func (f Filter) only(coll wire.Coll, bit int) bool { return f.mask[coll] == 1<<bit }

// ParseFilter parses value (of variable name, for messages) in NCCL's
// syntax: a comma list of names, or ^ and the names to exclude; since NCCL
// 2.24 also per collective, semicolon separated, where only the first list
// may omit its "collective:" prefix, e.g. "ring;allreduce:tree,ring" or
// "allreduce:^tree;broadcast:ring". Names are case-insensitive; names holds
// the choices gocl has (bit i = names[i]) and foreign the ones it accepts
// and ignores.
func ParseFilter(name, value string, names, foreign []string) (Filter, error) {
	all := uint16(1)<<(len(names)+len(foreign)) - 1
	f := Filter{text: strings.TrimSpace(value)}
	for i := range f.mask {
		f.mask[i] = all
	}
	fix := fmt.Sprintf("give a comma list of %s (^ first to exclude), optionally per collective as in \"allreduce:%s;broadcast:%s\"",
		strings.Join(names, ", "), names[0], names[len(names)-1])
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s=%q: %s: %s", name, value, fmt.Sprintf(format, args...), fix)
	}
	if f.text == "" {
		return f, nil
	}
	entries := strings.Split(f.text, ";")
	for i, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			if i == len(entries)-1 && i > 0 { // a trailing ';'
				continue
			}
			return f, bad("entry %d is empty", i+1)
		}
		prefix, list, scoped := strings.Cut(e, ":")
		if !scoped {
			if i > 0 {
				return f, bad("%q has no \"collective:\" prefix, which only the first list may omit", e)
			}
			list = e
		}
		set, err := parseList(list, names, foreign, all)
		if err != nil {
			return f, bad("%v", err)
		}
		if !scoped {
			for c := range f.mask {
				f.mask[c] = set
			}
			continue
		}
		coll, ok := collByName(strings.ToLower(strings.TrimSpace(prefix)))
		if !ok {
			return f, bad("%q is not a collective (allreduce, broadcast, reduce, allgather, reducescatter, alltoall, gather, scatter)", prefix)
		}
		f.mask[coll] = set
	}
	return f, nil
}

func parseList(list string, names, foreign []string, all uint16) (uint16, error) {
	list = strings.TrimSpace(list)
	exclude := strings.HasPrefix(list, "^")
	if exclude {
		list = strings.TrimSpace(list[1:])
	}
	if list == "" {
		return 0, fmt.Errorf("an empty list")
	}
	var set uint16
	for _, item := range strings.Split(list, ",") {
		item = strings.ToLower(strings.TrimSpace(item))
		i := index(names, item)
		if i < 0 {
			if j := index(foreign, item); j >= 0 {
				i = len(names) + j
			}
		}
		if i < 0 {
			return 0, fmt.Errorf("%q is not one of them", item)
		}
		set |= 1 << i
	}
	if exclude {
		set = all &^ set
	}
	return set, nil
}

func index(names []string, s string) int {
	for i, n := range names {
		if n == s {
			return i
		}
	}
	return -1
}

func collByName(s string) (wire.Coll, bool) {
	for c := wire.AllReduce; c < wire.SendRecv; c++ {
		if c.String() == s {
			return c, true
		}
	}
	return 0, false
}
