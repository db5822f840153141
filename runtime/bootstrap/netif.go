package bootstrap

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"gocl/runtime/config"
	"gocl/runtime/status"
)

// Iface is an interface and the address gocl binds on it.
type Iface struct {
	Name string
	IP   net.IP
}

// ifaceFilter is a parsed GOCL_SOCKET_IFNAME: "eth,ib" (prefixes), "^docker"
// (exclude prefixes), "=eth0" (exact names), like NCCL_SOCKET_IFNAME.
type ifaceFilter struct {
	exclude, exact bool
	names          []string
}

func parseIfaceFilter(s string) ifaceFilter {
	var f ifaceFilter
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "^") {
		f.exclude, s = true, s[1:]
	}
	if strings.HasPrefix(s, "=") {
		f.exact, s = true, s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			f.names = append(f.names, n)
		}
	}
	return f
}

func (f ifaceFilter) match(name string) bool {
	hit := false
	for _, n := range f.names {
		if (f.exact && name == n) || (!f.exact && strings.HasPrefix(name, n)) {
			hit = true
			break
		}
	}
	return hit != f.exclude
}

// candidate is one usable address of one interface.
type candidate struct {
	Iface
	loopback bool
}

func candidates(family string) ([]candidate, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, status.Errorf(status.SystemError, "cannot list network interfaces: %v", err)
	}
	var out []candidate
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			v4 := ipn.IP.To4() != nil
			if (family == "AF_INET" && !v4) || (family == "AF_INET6" && v4) {
				continue
			}
			out = append(out, candidate{Iface{ifc.Name, ipn.IP}, ifc.Flags&net.FlagLoopback != 0})
		}
	}
	// IPv4 first unless IPv6 was asked for: it is what people expect in logs.
	var v4, v6 []candidate
	for _, c := range out {
		if c.IP.To4() != nil {
			v4 = append(v4, c)
		} else {
			v6 = append(v6, c)
		}
	}
	return append(v4, v6...), nil
}

// ChooseIface picks the interface for this rank's sockets, as NCCL does:
// GOCL_SOCKET_IFNAME when set; otherwise the first interface that is up and
// is neither loopback nor docker*, and loopback when there is nothing else.
func ChooseIface() (Iface, error) {
	spec := config.String("SOCKET_IFNAME")
	cands, err := candidates(strings.ToUpper(strings.TrimSpace(config.String("SOCKET_FAMILY"))))
	if err != nil {
		return Iface{}, err
	}
	if spec != "" {
		f := parseIfaceFilter(spec)
		for _, c := range cands {
			if f.match(c.Name) {
				return c.Iface, nil
			}
		}
		var names []string
		for _, c := range cands {
			names = append(names, c.Name)
		}
		return Iface{}, status.Errorf(status.InvalidArgument,
			"GOCL_SOCKET_IFNAME=%q matches no interface that is up with an address (have: %s)", spec, strings.Join(names, ", "))
	}
	for _, c := range cands {
		if !c.loopback && !strings.HasPrefix(c.Name, "docker") {
			return c.Iface, nil
		}
	}
	for _, c := range cands {
		if c.loopback {
			return c.Iface, nil
		}
	}
	return Iface{}, status.Errorf(status.SystemError, "no network interface is up (not even loopback)")
}

// ChooseIfaceFor is ChooseIface for a rank joining the rendezvous at
// root: a root on loopback means every rank runs on this host (they all
// reach it there), so unless GOCL_SOCKET_IFNAME says otherwise the rank
// listens on loopback too, out of reach of other hosts.
func ChooseIfaceFor(root net.IP) (Iface, error) {
	if config.String("SOCKET_IFNAME") == "" && root.IsLoopback() {
		return Iface{Name: loopbackName(), IP: root}, nil
	}
	return ChooseIface()
}

// loopbackName is the loopback interface's name ("lo" on Linux).
func loopbackName() string {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			return ifc.Name
		}
	}
	return "lo"
}

// LocalIface finds the interface of this host that holds host's address
// (a name or an IP: MASTER_ADDR); ok is false when host is not an address
// of this host (a name that maps to it from outside, as a Kubernetes
// Service does).
func LocalIface(host string) (ifc Iface, ok bool, err error) {
	ips, err := lookupIPs(host)
	if err != nil {
		return Iface{}, false, err
	}
	cands, err := candidates("")
	if err != nil {
		return Iface{}, false, err
	}
	for _, ip := range ips {
		if ip.IsLoopback() {
			return Iface{Name: loopbackName(), IP: ip}, true, nil
		}
		for _, c := range cands {
			if c.IP.Equal(ip) {
				return c.Iface, true, nil
			}
		}
	}
	return Iface{}, false, nil
}

// lookupIPs resolves host, IPv4 addresses first, within 10 s.
func lookupIPs(host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, status.Errorf(status.InvalidArgument, "cannot resolve %q: %v", host, err)
	}
	var v4, v6 []net.IP
	for _, a := range addrs {
		if a.IP.To4() != nil {
			v4 = append(v4, a.IP)
		} else {
			v6 = append(v6, a.IP)
		}
	}
	return append(v4, v6...), nil
}

// SpeedMbps is the speed the interface reports in Mbit/s
// (/sys/class/net/NAME/speed), 0 when it reports none (loopback, virtual
// and wireless interfaces report -1 or nothing).
func (i Iface) SpeedMbps() int {
	b, err := os.ReadFile("/sys/class/net/" + i.Name + "/speed")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

func (i Iface) String() string { return fmt.Sprintf("%s:%s", i.Name, i.IP) }

// Listen opens a TCP listener on the interface, on a free port.
func (i Iface) Listen() (*net.TCPListener, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: i.IP})
	if err != nil {
		return nil, status.Errorf(status.SystemError, "cannot listen on %s: %v", i, err)
	}
	return ln, nil
}
