package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		wantCode int    // 0: parses
		wantErr  string // part of the error
		check    func(*testing.T, *invocation)
	}{
		{name: "what mount(8) passes", args: []string{"127.0.0.1:/", dir, "-o", "port=2050,mountport=2051,nfsvers=3,proto=tcp"},
			check: func(t *testing.T, inv *invocation) {
				if inv.server != "127.0.0.1" || inv.path != "/" || inv.cfg.port != 2050 || inv.cfg.mountPort != 2051 {
					t.Errorf("got %+v", inv)
				}
			}},
		{name: "mountport defaults to port", args: []string{"srv:/export", dir, "-o", "port=2050"},
			check: func(t *testing.T, inv *invocation) {
				if inv.cfg.mountPort != 2050 {
					t.Errorf("mountPort %d, want 2050", inv.cfg.mountPort)
				}
			}},
		{name: "IPv6 server in brackets", args: []string{"[::1]:/a/b", dir},
			check: func(t *testing.T, inv *invocation) {
				if inv.server != "::1" || inv.path != "/a/b" {
					t.Errorf("server %q path %q", inv.server, inv.path)
				}
			}},
		{name: "flags and joined -o", args: []string{"h:/", dir, "-nv", "-oro", "-o", "soft,timeo=15,retrans=1"},
			check: func(t *testing.T, inv *invocation) {
				c := inv.cfg
				if !c.readOnly || !c.soft || c.timeo != 1500*time.Millisecond || c.retrans != 1 || !inv.verbose {
					t.Errorf("got %+v", inv)
				}
			}},
		{name: "-r then rw", args: []string{"h:/", dir, "-r", "-o", "rw"},
			check: func(t *testing.T, inv *invocation) {
				if inv.cfg.readOnly {
					t.Error("read-only, want rw (options come after flags)")
				}
			}},
		{name: "every documented option", args: []string{"h:/", dir, "-o", strings.Join([]string{
			"hard", "intr", "timeo=600", "retrans=2", "rsize=65536", "wsize=65536", "ac", "acregmin=3",
			"acdirmax=60", "actimeo=5", "fg", "nconnect=1", "rdirplus", "retry=2", "sec=sys", "sharecache",
			"noresvport", "lookupcache=positive", "nofsc", "tcp", "mountproto=tcp6", "mounthost=h",
			"mountvers=3", "namlen=255", "nolock", "nocto", "noacl", "local_lock=all", "vers=3",
			"defaults", "nosuid", "nodev", "noexec", "noatime", "_netdev", "nofail", "x-systemd.automount",
		}, ",")}},
		{name: "unknown option", args: []string{"h:/", dir, "-o", "port=2050,bogus"}, wantCode: exitFail,
			wantErr: `an incorrect mount option was specified: unknown option "bogus"`},
		{name: "unknown option, sloppy", args: []string{"h:/", dir, "-s", "-o", "bogus=1"}},
		{name: "unknown option, sloppy option", args: []string{"h:/", dir, "-o", "bogus=1,sloppy"}},
		{name: "value on a flag", args: []string{"h:/", dir, "-o", "soft=1"}, wantCode: exitFail, wantErr: `"soft" takes no value`},
		{name: "no value", args: []string{"h:/", dir, "-o", "timeo"}, wantCode: exitFail, wantErr: `"timeo" needs a value`},
		{name: "not a number", args: []string{"h:/", dir, "-o", "port=abc"}, wantCode: exitFail, wantErr: "non-negative number"},
		{name: "port out of range", args: []string{"h:/", dir, "-o", "port=70000"}, wantCode: exitFail, wantErr: "not a TCP port"},
		{name: "bad choice", args: []string{"h:/", dir, "-o", "lookupcache=some"}, wantCode: exitFail, wantErr: "must be one of"},
		{name: "NFSv4", args: []string{"h:/", dir, "-o", "vers=4.2"}, wantCode: exitFail, wantErr: "NFS version 3 only"},
		{name: "UDP", args: []string{"h:/", dir, "-o", "udp"}, wantCode: exitFail, wantErr: "TCP only"},
		{name: "Kerberos", args: []string{"h:/", dir, "-o", "sec=krb5"}, wantCode: exitFail, wantErr: "AUTH_SYS"},
		{name: "unknown flavor", args: []string{"h:/", dir, "-o", "sec=magic"}, wantCode: exitFail, wantErr: "unknown security flavor"},
		{name: "server starts with -", args: []string{"-oremount:/", dir}, wantCode: exitFail, wantErr: "may not start with '-'"},
		{name: "path starts with -", args: []string{"h:-o", dir}, wantCode: exitFail, wantErr: "may not start with '-'"},
		{name: "relative path", args: []string{"h:export", dir}, wantCode: exitFail, wantErr: "must be absolute"},
		{name: "no colon", args: []string{"h", dir}, wantCode: exitFail, wantErr: "host:dir"},
		{name: "IPv6 without brackets", args: []string{"::1:/x", dir}, wantCode: exitFail, wantErr: "no server"},
		{name: "bad host", args: []string{"a b:/x", dir}, wantCode: exitFail, wantErr: "neither an address nor a host name"},
		{name: "missing mount point", args: []string{"h:/", dir + "/missing"}, wantCode: exitFail, wantErr: "does not exist"},
		{name: "too few arguments", args: []string{"h:/"}, wantCode: exitUsage, wantErr: "usage"},
		{name: "unknown flag", args: []string{"h:/", dir, "-x"}, wantCode: exitUsage, wantErr: "invalid flag -x"},
		{name: "stray argument", args: []string{"h:/", dir, "extra"}, wantCode: exitUsage, wantErr: "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, code, err := parseArgs(append([]string{"/sbin/mount.nfs"}, tt.args...))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v (exit %d), want none", err, code)
				}
				if tt.check != nil {
					tt.check(t, inv)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || code != tt.wantCode {
				t.Fatalf("error %v (exit %d), want one containing %q (exit %d)", err, code, tt.wantErr, tt.wantCode)
			}
		})
	}
}

func TestMajorTimeoutBacksOffLinearly(t *testing.T) {
	tests := []struct {
		timeo   time.Duration
		retrans int
		want    time.Duration
	}{
		{timeo: time.Second, retrans: 0, want: time.Second},
		{timeo: time.Second, retrans: 2, want: 6 * time.Second},                       // 1+2+3
		{timeo: 60 * time.Second, retrans: 2, want: 360 * time.Second},                // nfs(5) defaults
		{timeo: 300 * time.Second, retrans: 2, want: (300 + 600 + 600) * time.Second}, // capped at 600 s each
	}
	for _, tt := range tests {
		c := config{timeo: tt.timeo, retrans: tt.retrans}
		if got := c.majorTimeout(); got != tt.want {
			t.Errorf("timeo %v retrans %d: %v, want %v", tt.timeo, tt.retrans, got, tt.want)
		}
	}
}

func TestMountTimeoutFollowsRetry(t *testing.T) {
	tests := []struct {
		options string
		want    time.Duration
	}{
		{options: "", want: 2 * time.Minute}, // nfs(5): foreground default
		{options: "retry=5", want: 5 * time.Minute},
		{options: "retry=0,timeo=10,retrans=1", want: 3 * time.Second}, // one soft request
	}
	for _, tt := range tests {
		c := defaultConfig()
		if err := parseOptions(&c, tt.options); err != nil {
			t.Fatal(err)
		}
		if got := c.mountTimeout(); got != tt.want {
			t.Errorf("-o %q: %v, want %v", tt.options, got, tt.want)
		}
	}
}
