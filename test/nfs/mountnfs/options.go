package main

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// optionKind says what value an option takes.
type optionKind int

const (
	flag   optionKind = iota // no value: "soft"
	number                   // a non-negative integer: "timeo=600"
	text                     // any non-empty value: "mounthost=name"
)

// option is one option name nfs(5) or mount(8) documents. choices, when
// set, lists the values it takes.
type option struct {
	kind    optionKind
	choices []string
}

// The options nfs(5) documents (nfs-utils 2.6), NFSv4-only ones included
// (they are refused below with a reason), by the value they take.
var (
	nfsFlags = strings.Fields(`soft hard softreval nosoftreval intr nointr ac noac
		bg fg rdirplus nordirplus sharecache nosharecache resvport noresvport
		fsc nofsc sloppy udp tcp rdma lock nolock cto nocto acl noacl
		migration nomigration`)
	nfsNumbers = strings.Fields(`timeo retrans rsize wsize acregmin acregmax
		acdirmin acdirmax actimeo nconnect max_connect retry port mountport
		mountvers namlen minorversion`)
	nfsTexts = map[string][]string{ // option: the values it takes, nil: any
		"vers": nil, "nfsvers": nil, "sec": nil, "mounthost": nil, "clientaddr": nil,
		"proto": netids, "mountproto": netids,
		"lookupcache": {"all", "none", "pos", "positive"},
		"local_lock":  {"all", "flock", "posix", "none"},
	}
)

// The file-system-independent options of mount(8), which it hands to its
// helpers too.
var (
	mountFlags = strings.Fields(`defaults ro rw suid nosuid dev nodev exec noexec
		sync async dirsync atime noatime diratime nodiratime relatime norelatime
		strictatime nostrictatime lazytime nolazytime iversion noiversion mand
		nomand silent loud auto noauto user nouser users owner group nofail
		_netdev`)
	mountTexts = map[string][]string{"comment": nil}
)

// knownOptions holds every option above. Anything else is refused, as the
// kernel refuses it for a real NFS mount.
var knownOptions = func() map[string]option {
	known := map[string]option{}
	for _, name := range append(nfsFlags, mountFlags...) {
		known[name] = option{kind: flag}
	}
	for _, name := range nfsNumbers {
		known[name] = option{kind: number}
	}
	for _, texts := range []map[string][]string{nfsTexts, mountTexts} {
		for name, choices := range texts {
			known[name] = option{kind: text, choices: choices}
		}
	}
	return known
}()

// netids are the transports nfs(5) names for proto= and mountproto=.
var netids = []string{"udp", "udp6", "tcp", "tcp6", "rdma", "rdma6"}

// secFlavors are the security flavors nfs(5) names for sec=.
var secFlavors = []string{"none", "sys", "krb5", "krb5i", "krb5p", "lkey", "lkeyi", "lkeyp", "spkm", "spkmi", "spkmp"}

// config is a mount as the helper carries it out.
type config struct {
	port, mountPort int // the server's NFS and MOUNT ports
	readOnly        bool
	// noexec is the one mount flag taken from the options: FUSE mounts
	// here are always nosuid,nodev, as go-fuse makes them.
	noexec bool
	// soft makes a request fail with EIO after majorTimeout; hard ones
	// wait for the server for as long as their caller does.
	soft    bool
	timeo   time.Duration // wait for the first transmission's reply
	retrans int
	// cacheTime is how long the kernel may keep attributes and names
	// (noac: 0, actimeo=n: n seconds). 0 unless asked, so that changes
	// made on the server show at once.
	cacheTime time.Duration
	rsize     int // largest READ and WRITE sent
	sloppy    bool
	// retry is how long mounting keeps trying (retry=n minutes); 0
	// (retry=0) is as long as one soft request.
	retry time.Duration
}

func defaultConfig() config {
	// nfs(5) defaults for TCP: hard, timeo=600, retrans=2; port 2049.
	// Without mountport=, MOUNT is asked on the NFS port (the test
	// server serves both there) instead of through a portmapper.
	return config{port: 2049, timeo: 60 * time.Second, retrans: 2, rsize: 1 << 20, retry: 2 * time.Minute}
}

// mountTimeout is how long mounting keeps trying to reach the server.
func (c config) mountTimeout() time.Duration {
	if c.retry == 0 {
		return c.majorTimeout()
	}
	return c.retry
}

// majorTimeout is how long a soft request waits before it fails: the
// first transmission and retrans retransmissions, each waiting one timeo
// longer than the last (nfs(5): linear backoff, at most 600 s each).
func (c config) majorTimeout() time.Duration {
	var total time.Duration
	for i := 1; i <= c.retrans+1; i++ {
		total += min(time.Duration(i)*c.timeo, 600*time.Second)
	}
	return total
}

// incorrectOption is how mount.nfs reports an option the kernel refused.
const incorrectOption = "an incorrect mount option was specified"

// parseOptions applies a comma-separated option list on c. An option
// nfs(5) or mount(8) does not document is an error unless c.sloppy (the
// "sloppy" option or mount.nfs -s); one they document that this helper
// cannot honour (UDP, NFSv4, Kerberos) is always an error.
func parseOptions(c *config, list string) error {
	opts := splitOptions(list)
	if slices.Contains(opts, "sloppy") {
		c.sloppy = true
	}
	for _, o := range opts {
		name, value, hasValue := strings.Cut(o, "=")
		known, ok := knownOptions[name]
		switch {
		case strings.HasPrefix(name, "x-"):
			continue // userspace comments (x-systemd.*), for mount(8)
		case !ok && c.sloppy:
			continue
		case !ok:
			return fmt.Errorf("%s: unknown option %q (nfs(5) documents no such option)", incorrectOption, name)
		}
		if err := checkValue(name, known, value, hasValue); err != nil {
			return err
		}
		if err := c.apply(name, value); err != nil {
			return err
		}
	}
	if c.mountPort == 0 { // unset, or 0: "ask the portmapper"
		c.mountPort = c.port
	}
	return nil
}

func splitOptions(list string) []string {
	var opts []string
	for _, o := range strings.Split(list, ",") {
		if o != "" {
			opts = append(opts, o)
		}
	}
	return opts
}

// checkValue checks that option name has the value its kind needs.
func checkValue(name string, o option, value string, hasValue bool) error {
	switch {
	case o.kind == flag && hasValue:
		return fmt.Errorf("%s: option %q takes no value", incorrectOption, name)
	case o.kind != flag && value == "":
		return fmt.Errorf("%s: option %q needs a value", incorrectOption, name)
	case o.kind == number:
		if _, err := strconv.ParseUint(value, 10, 31); err != nil {
			return fmt.Errorf("%s: option %q needs a non-negative number, not %q", incorrectOption, name, value)
		}
	case o.choices != nil && !slices.Contains(o.choices, value):
		return fmt.Errorf("%s: %s=%s: the value must be one of %s", incorrectOption, name, value, strings.Join(o.choices, ", "))
	}
	return nil
}

// apply sets what option name (already checked) means for the mount.
func (c *config) apply(name, value string) error {
	n, _ := strconv.Atoi(value)
	switch name {
	case "ro", "rw":
		c.readOnly = name == "ro"
	case "soft", "hard":
		c.soft = name == "soft"
	case "timeo":
		c.timeo = time.Duration(max(n, 1)) * time.Second / 10
	case "retrans":
		c.retrans = n
	case "retry":
		c.retry = time.Duration(n) * time.Minute
	case "port":
		if n > 65535 {
			return fmt.Errorf("%s: port=%d is not a TCP port", incorrectOption, n)
		}
		// port=0 asks the portmapper, which the test server lacks.
		if n != 0 {
			c.port = n
		}
	case "mountport":
		if n > 65535 {
			return fmt.Errorf("%s: mountport=%d is not a TCP port", incorrectOption, n)
		}
		c.mountPort = n
	case "rsize", "wsize":
		c.rsize = min(c.rsize, max(n, 4096))
	case "noac":
		c.cacheTime = 0
	case "actimeo":
		c.cacheTime = time.Duration(n) * time.Second
	case "exec", "noexec":
		c.noexec = name == "noexec"
	default:
		return c.applyVersionAndTransport(name, value)
	}
	return nil
}

// applyVersionAndTransport refuses the documented options this helper
// cannot honour: it speaks NFSv3 with AUTH_SYS over TCP and nothing else.
func (c *config) applyVersionAndTransport(name, value string) error {
	unsupported := func(why string) error {
		return fmt.Errorf("option %s is not supported by this test helper: %s", strings.TrimSuffix(name+"="+value, "="), why)
	}
	switch name {
	case "vers", "nfsvers":
		if value != "3" && value != "3.0" {
			return unsupported("it speaks NFS version 3 only")
		}
	case "mountvers":
		if value != "3" {
			return unsupported("it speaks MOUNT version 3 only")
		}
	case "proto", "mountproto":
		if value != "tcp" && value != "tcp6" {
			return unsupported("it speaks TCP only")
		}
	case "udp", "rdma":
		return unsupported("it speaks TCP only")
	case "sec":
		for _, f := range strings.Split(value, ":") {
			if !slices.Contains(secFlavors, f) {
				return fmt.Errorf("%s: sec=%s: unknown security flavor %q", incorrectOption, value, f)
			}
			if f != "sys" && f != "none" {
				return unsupported("it sends AUTH_SYS credentials only")
			}
		}
	case "minorversion", "clientaddr", "migration", "nomigration":
		return unsupported("it is an NFSv4 option and this helper speaks NFS version 3 only")
	}
	return nil
}

// parseSpec splits a remote target "server:/path", with an IPv6 server in
// brackets ("[::1]:/path"). Neither part may start with "-", so that
// nothing in a spec can ever be read as an option.
func parseSpec(spec string) (server, path string, err error) {
	bad := func(why string) error {
		return fmt.Errorf("remote share %q not in 'host:dir' format: %s", spec, why)
	}
	if strings.HasPrefix(spec, "[") {
		end := strings.Index(spec, "]")
		if end < 0 {
			return "", "", bad("no ']' after an IPv6 address")
		}
		var rest string
		server, rest = spec[1:end], spec[end+1:]
		if net.ParseIP(server) == nil || !strings.Contains(server, ":") {
			return "", "", bad("not an IPv6 address in brackets")
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", bad("no ':' after the server")
		}
		path = rest[1:]
	} else {
		var ok bool
		server, path, ok = strings.Cut(spec, ":")
		if !ok {
			return "", "", bad("no ':' between server and path")
		}
	}
	switch {
	case server == "":
		return "", "", bad("no server")
	case strings.HasPrefix(server, "-"):
		return "", "", bad("the server may not start with '-'")
	case strings.HasPrefix(path, "-"):
		return "", "", bad("the path may not start with '-'")
	case !strings.HasPrefix(path, "/"):
		return "", "", bad("the path must be absolute")
	case !validHost(server):
		return "", "", bad("the server is neither an address nor a host name")
	}
	return server, path, nil
}

// validHost accepts IP addresses and DNS host names.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}
