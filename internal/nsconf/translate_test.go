package nsconf

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
)

// translateText translates src as "ns.conf" and returns the result and its
// report; every written configuration must pass lbcore.ParseConfig.
func translateText(t *testing.T, src, vserver string) (*Result, string) {
	t.Helper()
	res := Translate("ns.conf", []byte(src), vserver)
	var rep bytes.Buffer
	if err := res.WriteReport(&rep); err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Outputs {
		if _, err := lbcore.ParseConfig(o.JSON); err != nil {
			t.Errorf("ParseConfig(%s) = %v\n%s", o.File, err, o.JSON)
		}
	}
	return res, rep.String()
}

const servers = `add server s1 192.0.2.1
add server s2 192.0.2.2
add server s3 192.0.2.3
`

func TestTranslate(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		failed bool
		// report lines that must appear, exactly
		report []string
		// out maps a file to texts its JSON must contain ("" : the file
		// must not be written)
		out map[string][]string
	}{
		{
			name: "NetScaler's default method is written",
			src:  servers + "add service a s1 HTTP 80\nadd lb vserver v HTTP 192.0.2.100 80\nbind lb vserver v a\n",
			report: []string{
				"ns.conf:1: translated: add server s1",
				"ns.conf:2: ignored: add server s2: not used by a translated lb vserver",
				"ns.conf:5: translated: add lb vserver v: v.json (LEASTCONNECTION, 1 service, passiveHealth)",
				"ns.conf:6: translated: bind lb vserver v a",
			},
			out: map[string][]string{"v.json": {`"lbMethod": "LEASTCONNECTION"`, `{"name": "a", "address": "192.0.2.1:80"}`}},
		},
		{
			name: "commands and flags are case-insensitive",
			src: "ADD Server s1 192.0.2.1\nadd SERVICE a s1 http 80 -STATE disabled -HashID 9\n" +
				"Add LB VServer v http -LBMETHOD urlhash -hashlength 12\nBIND lb vserver v a -WEIGHT 4\n",
			out: map[string][]string{"v.json": {`"lbMethod": "URLHASH"`, `"hashLength": 12`,
				`{"name": "a", "address": "192.0.2.1:80", "weight": 4, "enabled": false, "hashId": "9"}`}},
		},
		{
			name: "set lb vserver changes what add set",
			src: servers + "add service a s1 HTTP 80\nadd lb vserver v HTTP\nbind lb vserver v a\n" +
				"set lb vserver v -lbMethod SOURCEIPHASH -netmask 255.255.0.0 -v6netmasklen 48 -backupLBMethod ROUNDROBIN\n",
			report: []string{"ns.conf:7: translated: set lb vserver v"},
			out: map[string][]string{"v.json": {`"lbMethod": "SOURCEIPHASH"`, `"netmask": "255.255.0.0"`, `"v6NetmaskLen": 48`,
				`"backupLBMethod": "ROUNDROBIN"`}},
		},
		{
			name: "masks and hash length only where the method uses them",
			src: servers + "add service a s1 HTTP 80\n" +
				"add lb vserver u HTTP -lbMethod URLHASH -netmask 255.255.0.0\nbind lb vserver u a\n" +
				"add lb vserver p HTTP -lbMethod SRCIPSRCPORTHASH -netmask 255.255.0.0 -hashLength 9\nbind lb vserver p a\n",
			report: []string{"ns.conf:7: warning: -netmask 255.255.0.0: not written: the NetScaler reference applies it to DESTINATIONIPHASH, SOURCEIPHASH and SRCIPDESTIPHASH only"},
			out: map[string][]string{
				"u.json": {`"lbMethod": "URLHASH",` + "\n" + `  "passiveHealth"`},
				"p.json": {`"lbMethod": "SRCIPSRCPORTHASH",` + "\n" + `  "passiveHealth"`},
			},
		},
		{
			name: "nearest methods",
			src: servers + "add service a s1 HTTP 80\n" +
				"add lb vserver r HTTP -lbMethod LRTM -backupLBMethod LEASTPACKETS\nbind lb vserver r a\n" +
				"add lb vserver t HTTP -lbMethod TOKEN -backupLBMethod ROUNDROBIN\nbind lb vserver t a\n" +
				"add lb vserver u HTTP -lbMethod TOKEN -rule \"HTTP.REQ.BODY(10)\"\nbind lb vserver u a\n",
			report: []string{
				"ns.conf:5: warning: -lbMethod LRTM: written as LEASTCONNECTION, the nearest hashlb has: hashlb measures no response times; LRTM weighs active connections by response time, and least connection is its connection half",
				"ns.conf:7: warning: -lbMethod TOKEN: written as ROUNDROBIN, the backup method NetScaler uses for a request without a token: TOKEN without -rule reads the TCP payload (-dataOffset, -dataLength), which hashlb does not see",
				`ns.conf:9: warning: -lbMethod TOKEN: written as LEASTCONNECTION, the backup method NetScaler uses for a request without a token: -rule "HTTP.REQ.BODY(10)": "HTTP.REQ.BODY(10)" not understood (the translated values are HTTP.REQ.HEADER, HTTP.REQ.COOKIE.VALUE, HTTP.REQ.URL.QUERY.VALUE, HTTP.REQ.URL.PATH.GET, HTTP.REQ.URL.PATH, HTTP.REQ.URL, HTTP.REQ.HOSTNAME and CLIENT.IP.SRC)`,
			},
			out: map[string][]string{"r.json": {`"lbMethod": "LEASTCONNECTION"`}, "t.json": {`"lbMethod": "ROUNDROBIN"`}},
		},
		{
			name: "the backup method is written only for a hash method",
			src: servers + "add service a s1 HTTP 80\n" +
				"add lb vserver d HTTP -lbMethod DOMAINHASH -backupLBMethod LEASTRESPONSETIME\nbind lb vserver d a\n",
			report: []string{"ns.conf:5: warning: -backupLBMethod LEASTRESPONSETIME: written as LEASTCONNECTION: hashlb measures no response times; NetScaler's LEASTRESPONSETIME weighs active connections by response time, and least connection is its connection half"},
			out:    map[string][]string{"d.json": {`"backupLBMethod": "LEASTCONNECTION"`}},
		},
		{
			name: "persistence timeouts are clamped to 10 minutes and written in the largest unit",
			src: servers + "add service a s1 HTTP 80\n" +
				"add lb vserver d HTTP -persistenceType SOURCEIP\nbind lb vserver d a\n" +
				"add lb vserver e HTTP -persistenceType CALLID -timeout 5\nbind lb vserver e a\n" +
				"add lb vserver f HTTP -persistenceType DESTIP -timeout 120\nbind lb vserver f a\n" +
				"add lb vserver g HTTP -persistenceType SRCIPDESTIP -timeout 1440 -persistMask 255.255.255.0\nbind lb vserver g a\n" +
				"add lb vserver h HTTP -persistenceType SOURCEIP -timeout 25 -v6persistmasklen 64\nbind lb vserver h a\n",
			report: []string{
				"ns.conf:5: warning: no -timeout: NetScaler's default is 2 minutes: persistence.expire written as 10m, hashlb's least (clamped)",
				"ns.conf:7: warning: -timeout 5 (minutes): persistence.expire written as 10m, hashlb's least (clamped)",
			},
			out: map[string][]string{
				"d.json": {`"keys": ["${client.ip}"]`, `"expire": "10m"`},
				"e.json": {`"keys": ["${sip.callid}"]`, `"expire": "10m"`},
				"f.json": {`"keys": ["${server.ip}"]`, `"expire": "2h"`},
				"g.json": {`"keys": ["${client.ip | replace(\".*:.*\", \"\") | mask(24) || client.ip}", "${server.ip | replace(\".*:.*\", \"\") | mask(24) || server.ip}"]`, `"expire": "1d"`},
				"h.json": {`"keys": ["${client.ip | mask(64)}"]`, `"expire": "25m"`},
			},
		},
		{
			name: "RULE persistence and TOKEN share the rule",
			src: servers + "add service a s1 HTTP 80\n" +
				`add lb vserver v HTTP -lbMethod TOKEN -rule "HTTP.REQ.COOKIE.VALUE(\"JSESSIONID\")" -persistenceType RULE -timeout 30` + "\n" +
				"bind lb vserver v a\n",
			out: map[string][]string{"v.json": {`"token": "${request.cookie.JSESSIONID}"`, `"keys": ["${request.cookie.JSESSIONID}"]`, `"expire": "30m"`}},
		},
		{
			name: "persistence hashlb cannot do",
			src: servers + "add service a s1 HTTP 80\n" +
				"add lb vserver c HTTP -persistenceType SOURCEIP -cookieName SRV -persistenceBackup SOURCEIP\nbind lb vserver c a\n" +
				"add lb vserver s SSL -persistenceType SSLSESSION\nbind lb vserver s a\n" +
				"add lb vserver r HTTP -persistenceType RULE\nbind lb vserver r a\n",
			report: []string{
				`ns.conf:5: warning: -cookieName SRV: not translated: it is COOKIEINSERT's, and -persistenceType is not`,
				`ns.conf:5: warning: -persistenceBackup SOURCEIP: not translated: hashlb keeps one persistence key; the backup is translated for COOKIEINSERT only`,
				"ns.conf:7: warning: -persistenceType SSLSESSION: not translated: TLS session ids are not visible to a Wasm HTTP filter (Envoy terminates TLS before hashlb sees the request)",
				"ns.conf:9: warning: -persistenceType RULE: not translated: no -rule says what to persist on",
			},
			out: map[string][]string{"c.json": {`"keys": ["${client.ip}"]`}, "s.json": {`"services"`}},
		},
		{
			// NetScaler's http-cookie-persistence page: -timeout is the
			// inactivity in minutes, 0 a session cookie; the backup
			// persistence applies when the client sends no cookie.
			name: "COOKIEINSERT becomes the session block, SOURCEIP backup the persistence",
			src: servers + "add service a s1 HTTP 80\nadd service b s2 HTTP 80\n" +
				"add lb vserver c HTTP -lbMethod ROUNDROBIN -persistenceType COOKIEINSERT -timeout 0 -cookieName SRV -cookieDomain example.com -persistenceBackup SOURCEIP -backupPersistenceTimeout 30 -persistMask 255.255.255.0\n" +
				"bind lb vserver c a\nbind lb vserver c b\n" +
				"add lb vserver p HTTP -persistenceType COOKIEINSERT -timeout 60 -httpOnlyCookieFlag DISABLED\nbind lb vserver p a\n" +
				"add lb vserver d HTTP -persistenceType COOKIEINSERT -cookieName \"a b\"\nbind lb vserver d a\n",
			report: []string{
				"ns.conf:6: translated: add lb vserver c: c.json (ROUNDROBIN, 2 services, session cookie, persistence, passiveHealth)",
				"ns.conf:6: warning: -persistenceType COOKIEINSERT: hashlb signs its session cookie with the VM's HASHLB_SESSION_KEY (32 bytes or more, the same on every proxy); without it the plugin refuses to start. NetScaler's NSC_ cookies are not read: their clients start a new session",
				"ns.conf:9: translated: add lb vserver p: p.json (LEASTCONNECTION, 1 service, session cookie, passiveHealth)",
				`ns.conf:11: warning: -cookieName "a b": not a cookie name hashlb accepts (a token of at most 128 bytes): the vserver's own NSC_d is used`,
				"ns.conf:11: warning: no -timeout: NetScaler's default is 2 minutes; written as idleTimeout 2m with a permanent cookie kept for 1d",
			},
			out: map[string][]string{
				"c.json": {`"session": {"type": "cookie", "name": "SRV", "domain": "example.com", "lifetime": "session"}`,
					`"keys": ["${client.ip | replace(\".*:.*\", \"\") | mask(24) || client.ip}"]`, `"expire": "30m"`},
				"p.json": {`"session": {"type": "cookie", "name": "NSC_p", "httpOnly": false, "lifetime": "permanent", "absoluteTimeout": "1d", "idleTimeout": "1h"}`},
				"d.json": {`"session": {"type": "cookie", "name": "NSC_d", "lifetime": "permanent", "absoluteTimeout": "1d", "idleTimeout": "2m"}`},
			},
		},
		{
			name: "usePortForHashLb NO hashes the IP; two ports of one IP collide",
			src: "set lb parameter -useportforhashlb NO\n" + servers +
				"add service a s1 HTTP 80\nadd service b s1 HTTP 8080\nadd service c s2 HTTP 80 -hashId 12\n" +
				"add lb vserver v HTTP -lbMethod URLHASH\nbind lb vserver v a\nbind lb vserver v b\nbind lb vserver v c\n",
			failed: true,
			report: []string{
				"ns.conf:1: translated: set lb parameter",
				"ns.conf:10: failed: bind lb vserver v b: b not written: -usePortForHashLb NO (ns.conf:1) hashes it as 192.0.2.1, as a (ns.conf:5) does: NetScaler gives both the same hash, hashlb needs one identity per service (give one a -hashId)",
			},
			out: map[string][]string{"v.json": {`{"name": "a", "address": "192.0.2.1:80", "hashId": "192.0.2.1"}`,
				`{"name": "c", "address": "192.0.2.2:80", "hashId": "12"}`}},
		},
		{
			name: "service groups",
			src: servers + "add serviceGroup sg HTTP -maxClient 0\n" +
				"bind serviceGroup sg s1 80 -weight 3\nbind serviceGroup sg s2 80 -state DISABLED -hashId 5\nbind serviceGroup sg 192.0.2.9 81\n" +
				"bind serviceGroup sg -monitorName http-ecv\n" +
				"add serviceGroup off HTTP -state DISABLED\nbind serviceGroup off s3 80\n" +
				"add lb vserver v HTTP -lbMethod ROUNDROBIN\nbind lb vserver v sg\nbind lb vserver v off\n",
			report: []string{
				"ns.conf:8: not translated: bind serviceGroup sg: the built-in monitor http-ecv: -send not set: nothing to probe with",
				"ns.conf:10: translated: bind serviceGroup off s3 80",
			},
			out: map[string][]string{"v.json": {
				`{"name": "sg_s1_80", "address": "192.0.2.1:80", "weight": 3}`,
				`{"name": "sg_s2_80", "address": "192.0.2.2:80", "enabled": false, "hashId": "5"}`,
				`{"name": "sg_192.0.2.9_81", "address": "192.0.2.9:81"}`,
				`{"name": "off_s3_80", "address": "192.0.2.3:80", "enabled": false}`}},
		},
		{
			name:   "weight on a service group bind fails",
			src:    servers + "add serviceGroup sg HTTP\nbind serviceGroup sg s1 80\nadd lb vserver v HTTP\nbind lb vserver v sg -weight 2\n",
			failed: true,
			report: []string{"ns.conf:7: failed: bind lb vserver v sg: -weight: sg is a service group; its members' weights are set by bind serviceGroup",
				"ns.conf:6: not translated: add lb vserver v: no service is bound to it (a hashlb configuration needs one)"},
			out: map[string][]string{"v.json": nil},
		},
		{
			name: "IPv6 servers and disabled servers",
			src: "add server v6 2001:db8::10\nadd server off 192.0.2.1 -state DISABLED\n" +
				"add service a v6 HTTP 443\nadd service b off HTTP 80\nadd lb vserver v SSL\nbind lb vserver v a\nbind lb vserver v b\n",
			out: map[string][]string{"v.json": {`{"name": "a", "address": "[2001:db8::10]:443"}`,
				`{"name": "b", "address": "192.0.2.1:80", "enabled": false}`}},
		},
		{
			name: "names hashlb cannot take are sanitised",
			src:  "add server s1 192.0.2.1\nadd service \"web svc:1\" s1 HTTP 80\nadd service web_svc_1 s1 HTTP 81\nadd lb vserver \"my vs\" HTTP\nbind lb vserver \"my vs\" \"web svc:1\"\nbind lb vserver \"my vs\" web_svc_1\n",
			report: []string{
				`ns.conf:2: warning: service name "web svc:1" written as "web_svc_1" (hashlb names are letters, digits and - . _ ~ ! # $ % & ' * + ^ ` + "` |)",
				"ns.conf:6: warning: service web_svc_1 written as web_svc_1~2: web_svc_1 is web svc:1's name",
				`ns.conf:4: translated: add lb vserver "my vs": my_vs.json (LEASTCONNECTION, 2 services, passiveHealth)`,
			},
			out: map[string][]string{"my_vs.json": {`"name": "web_svc_1~2"`}},
		},
		{
			name: "file names that collide",
			src:  servers + "add service a s1 HTTP 80\nadd lb vserver \"a b\" HTTP\nadd lb vserver a_b HTTP\nbind lb vserver \"a b\" a\nbind lb vserver a_b a\n",
			report: []string{
				"ns.conf:6: translated: add lb vserver a_b: a_b-2.json (LEASTCONNECTION, 1 service, passiveHealth)",
				"ns.conf:6: warning: written as a_b-2.json: a_b.json is lb vserver a b's",
			},
			out: map[string][]string{"a_b.json": {`"services"`}, "a_b-2.json": {`"services"`}},
		},
		{
			name:   "malformed lines fail and the rest is translated",
			src:    servers + "add service a s1 HTTP 80\nadd service b s2 HTTP 99999\nadd lb vserver v HTTP -lbMethod URLHASH -bogus 1\nadd lb vserver w HTTP -lbMethod FASTEST\nadd lb vserver x \"HTTP\nadd lb vserver y HTTP\nbind lb vserver v a\nbind lb vserver y b\nbind lb vserver y a\nbind lb vserver z a\nset lb vserver q -lbMethod URLHASH\nadd service a s3 HTTP 80\nbind lb vserver y a\n",
			failed: true,
			report: []string{
				`ns.conf:5: failed: add service b: port "99999" is not a number in [1, 65535]`,
				"ns.conf:6: failed: add lb vserver v: -bogus: unknown flag (not a flag of add lb vserver in the NetScaler command reference)",
				`ns.conf:7: failed: add lb vserver w: -lbMethod "FASTEST" is not one of ROUNDROBIN, LEASTCONNECTION, LEASTRESPONSETIME, URLHASH, DOMAINHASH, DESTINATIONIPHASH, SOURCEIPHASH, SRCIPDESTIPHASH, LEASTBANDWIDTH, LEASTPACKETS, TOKEN, SRCIPSRCPORTHASH, LRTM, CALLIDHASH, CUSTOMLOAD, USER_TOKEN`,
				`ns.conf:8: failed: add lb vserver x: col 18: unbalanced quote (no closing ")`,
				"ns.conf:9: translated: add lb vserver y: y.json (LEASTCONNECTION, 1 service, passiveHealth)",
				"ns.conf:10: failed: bind lb vserver v a: lb vserver v was not added (ns.conf:6 failed)",
				"ns.conf:11: failed: bind lb vserver y b: service or service group b was not added (ns.conf:5 failed)",
				"ns.conf:13: failed: bind lb vserver z a: no lb vserver z",
				"ns.conf:14: failed: set lb vserver q: no lb vserver q",
				"ns.conf:15: failed: add service a: a was already added at ns.conf:4",
				"ns.conf:16: failed: bind lb vserver y a: a is already bound to y (ns.conf:12)",
			},
			out: map[string][]string{"y.json": {`"services"`}, "v.json": nil},
		},
		{
			name:   "lines that are not load balancing are ignored; others hashlb lacks are not translated",
			failed: true,
			src: "#NS14.1 Build 25.56\nset ns config -IPAddress 192.0.2.5 -netmask 255.255.255.0\nenable ns feature LB CS SSL\n" +
				"add ssl certKey ck -cert c.pem -key k.pem\nadd cs vserver cs1 HTTP 192.0.2.50 80\nadd lb monitor m HTTP -respCode 200\n" +
				"bind service a -monitorName m\nadd lb group g\nset lb parameter -lbHashAlgorithm PRAC\nadd vlan 10\n",
			report: []string{
				"ns.conf:1: ignored: comment",
				"ns.conf:2: ignored: set ns config: appliance settings, not load balancing",
				"ns.conf:4: ignored: add ssl certKey ck: TLS settings: Envoy terminates TLS",
				"ns.conf:5: ignored: add cs vserver cs1: content switching, not load balancing: route to each lb vserver's configuration with Envoy routes",
				"ns.conf:6: ignored: add lb monitor m: not used by a translated lb vserver",
				"ns.conf:7: failed: bind service a: no service or service group a",
				"ns.conf:8: not translated: add lb group g: lb groups (persistence shared across vservers) are not translated: each hashlb configuration keeps its own table",
				"ns.conf:9: not translated: set lb parameter: sets nothing hashlb has (see the warnings)",
				"ns.conf:9: warning: -lbHashAlgorithm PRAC: not translated: hashlb ranks services by rendezvous hashing (the DEFAULT algorithm of the hashing methods page); PRAC and JARH are not translated",
				"ns.conf:10: ignored: add vlan 10: not load balancing",
				"ns.conf: 10 lines: 0 translated, 7 ignored, 0 ignored (built-in), 2 not translated, 1 failed; 1 warning; 0 configurations",
			},
		},
		{
			name: "domain names and port * are not translatable",
			src: "add server f app.example.com\nadd server s1 192.0.2.1\nadd service a f HTTP 80\nadd service b s1 ANY *\nadd service c s1 HTTP 80\n" +
				"add lb vserver v TCP\nbind lb vserver v a\nbind lb vserver v b\nbind lb vserver v c\n",
			failed: true,
			report: []string{
				"ns.conf:1: not translated: add server f: app.example.com is a domain name: hashlb needs each service's ip:port (resolve it and add the addresses as servers, or balance it with an Envoy STRICT_DNS cluster)",
				"ns.conf:4: not translated: add service b: port * (any port): hashlb needs a service's port",
				`ns.conf:6: warning: service type TCP: written for hashlb's HTTP filter (filterType http), which balances requests where Envoy handles this traffic as HTTP; to balance TCP connections instead, add "filterType": "network" and run hashlb before tcp_proxy (README: TCP), with a method and keys that need no HTTP`,
				"ns.conf:7: failed: bind lb vserver v a: a not written: its server f (ns.conf:1) is a domain name, not an IP address",
				"ns.conf:8: failed: bind lb vserver v b: b not written: port * (any port): hashlb needs a service's port",
			},
			out: map[string][]string{"v.json": {`{"name": "c", "address": "192.0.2.1:80"}`}},
		},
		{
			name: "flags hashlb has no equivalent for are warned, quiet ones are not",
			src: servers + "add service a s1 HTTP 80 -maxClient 100 -cip ENABLED X-Forwarded-For -cltTimeout 180\n" +
				"add lb vserver v HTTP 192.0.2.100 80 -cltTimeout 180 -backupVServer vs2 -state DISABLED -comment \"old -x\"\nbind lb vserver v a\n",
			report: []string{
				"ns.conf:4: warning: -maxClient 100: not translated: hashlb has no per-service connection or request limit (use Envoy's circuit breakers)",
				"ns.conf:5: warning: -backupVServer vs2: not translated: backup vservers, spillover and redirects when DOWN are not translated: configure Envoy's fallback by hand",
				`ns.conf:5: warning: the vserver is DISABLED on NetScaler, which serves nothing on it: written with every service disabled ("enabled": false), so hashlb answers every request 503; to serve as NetScaler would once the vserver is enabled, remove "enabled": false from a (the services enabled on NetScaler)`,
			},
			out: map[string][]string{"v.json": {`{"name": "a", "address": "192.0.2.1:80", "enabled": false}`}},
		},
		{
			name: "named policy expressions",
			src: servers + "add policy expression tenant \"HTTP.REQ.HEADER(\\\"X-Tenant\\\")\"\nadd policy expression unused \"CLIENT.IP.SRC\"\n" +
				"add service a s1 HTTP 80\nadd lb vserver v HTTP -lbMethod TOKEN -rule tenant\nbind lb vserver v a\n",
			report: []string{
				"ns.conf:4: translated: add policy expression tenant",
				"ns.conf:5: ignored: add policy expression unused: not used by a translated lb vserver",
			},
			out: map[string][]string{"v.json": {`"token": "${request.header.x-tenant}"`}},
		},
		{
			name: "a member dropped by a -usePortForHashLb NO collision fails like its bind",
			src: "set lb parameter -usePortForHashLb NO\n" + servers + "add serviceGroup sg2 HTTP\nbind serviceGroup sg2 s1 81\n" +
				"bind serviceGroup sg2 s1 82 -state DISABLED\nadd lb vserver v HTTP -lbMethod URLHASH -backupLBMethod ROUNDROBIN\nbind lb vserver v sg2\n",
			failed: true,
			report: []string{
				"ns.conf:7: failed: bind serviceGroup sg2 s1 82: not written for lb vserver v: -usePortForHashLb NO (ns.conf:1) hashes it as 192.0.2.1, as sg2_s1_81 (ns.conf:6) does: NetScaler gives both the same hash, hashlb needs one identity per service (give one a -hashId)",
				"ns.conf:9: failed: bind lb vserver v sg2: sg2_s1_82 not written: -usePortForHashLb NO (ns.conf:1) hashes it as 192.0.2.1, as sg2_s1_81 (ns.conf:6) does: NetScaler gives both the same hash, hashlb needs one identity per service (give one a -hashId)",
			},
			out: map[string][]string{"v.json": {`{"name": "sg2_s1_81", "address": "192.0.2.1:81", "hashId": "192.0.2.1"}`}},
		},
		{
			name: "the appliance's own lines are built-in and counted apart",
			src: "add service nshttpd-gui-127.0.0.1-80 127.0.0.1 HTTP 80 -gslb NONE\nset service nshttpd-gui-127.0.0.1-80 -cip ENABLED\n" +
				"add service nskrpcs-::1l-3009 ::1 TCP 3009\nset lb monitor ldns-dns LDNS-DNS -query . -queryType Address\nset lb monitor tcp-default TCP -interval 10\n" +
				"add service nsweb-10.0.0.1-80 10.0.0.1 HTTP 80\n",
			report: []string{
				"ns.conf:1: ignored (built-in): add service nshttpd-gui-127.0.0.1-80: a service of the appliance's own daemons",
				"ns.conf:2: ignored (built-in): set service nshttpd-gui-127.0.0.1-80: a service of the appliance's own daemons",
				"ns.conf:3: ignored (built-in): add service nskrpcs-::1l-3009: a service of the appliance's own daemons",
				"ns.conf:4: ignored (built-in): set lb monitor ldns-dns: a monitor built into the appliance",
				"ns.conf:6: ignored: add service nsweb-10.0.0.1-80: not used by a translated lb vserver", // not loopback, not a daemon: the operator's
				"ns.conf: 6 lines: 0 translated, 1 ignored, 5 ignored (built-in), 0 not translated, 0 failed; 0 warnings; 0 configurations",
			},
		},
		{
			name: "a quote wrapped over lines is joined; a command after it is not",
			src: servers + "add service a s1 HTTP 80\nadd lb vserver v HTTP -lbMethod TOKEN -rule \"HTTP.REQ.HEADER(\\\"X-Tenant\\\") ALT\n" +
				"  CLIENT.IP.SRC\" -cltTimeout 180\nbind lb vserver v a\nadd lb vserver w HTTP -comment \"open\nbind lb vserver w a\n",
			failed: true,
			report: []string{
				"ns.conf:5: translated: add lb vserver v: v.json (TOKEN, 1 service, passiveHealth)",
				"ns.conf:5: warning: the command is wrapped over lines 5-6: read as one line, the breaks as spaces",
				"ns.conf:6: ignored: continues ns.conf:5 (a command wrapped over lines)",
				`ns.conf:8: failed: add lb vserver w: col 32: unbalanced quote (no closing ")`,
			},
			out: map[string][]string{"v.json": {`"token": "${request.header.x-tenant || client.ip}"`}},
		},
		{
			name: "-healthMonitor NO beside a service with tcp-default: passiveHealth, and a warning on its line",
			src:  servers + "add service a s1 HTTP 80 -healthMonitor NO\nadd service b s2 HTTP 80\nadd lb vserver v HTTP\nbind lb vserver v a\nbind lb vserver v b\n",
			report: []string{
				"ns.conf:4: warning: -healthMonitor NO: NetScaler sends a no probes and shows it UP; hashlb's passiveHealth covers every service of a configuration, so lb vserver v's can eject it after failed connections: remove passiveHealth from v's configuration to keep it UP",
				"ns.conf:6: translated: add lb vserver v: v.json (LEASTCONNECTION, 2 services, passiveHealth)",
			},
			out: map[string][]string{"v.json": {`"passiveHealth": {"consecutiveFailures": 3}`}},
		},
		{
			name: "monitors: the one bound to most services, TLS services, and what other types need",
			src: servers + "add service a s1 SSL 443\nadd service b s2 SSL 443\nadd service c s3 HTTP 80\n" +
				"add lb monitor m1 HTTP-ECV -send \"POST /x\"\n" +
				"add lb monitor m2 HTTP -httpRequest \"GET /ready\" -respCode 200-204 301 -interval 2 MIN -resptimeout 90 -successRetries 12 -customHeaders \"Host: h.example\\r\\nX-A: 1\\r\\n\" -secure YES\n" +
				"add lb monitor m3 TCP\nadd lb vserver v HTTP -lbMethod ROUNDROBIN\nbind lb vserver v a\nbind lb vserver v b\nbind lb vserver v c\n" +
				"bind service a -monitorName m2\nbind service b -monitorName m2\nbind service c -monitorName m3\nbind service c -monitorName m1\n",
			report: []string{
				`ns.conf:7: not translated: add lb monitor m1: -send "POST /x": method POST: hashlb's probe sends GET or HEAD`,
				"ns.conf:8: translated: add lb monitor m2: the healthCheck of v.json",
				"ns.conf:8: warning: headers X-A: 1: not sent: hashlb's probe sends only :method, :path, :authority and user-agent",
				"ns.conf:8: warning: -secure YES: the monitor probes over TLS: give healthCheck.cluster an upstream TLS context (transport_socket envoy.transport_sockets.tls)",
				"ns.conf:8: warning: -resptimeout 90s: written as 1m, hashlb's most (clamped)",
				"ns.conf:8: warning: -successRetries 12: written as 10, hashlb's range being 1-10 (clamped)",
				"ns.conf:9: not translated: add lb monitor m3: monitor type TCP: it checks a TCP connection, and hashlb's healthCheck is an HTTP probe: add passiveHealth (a failed connection counts as a failure and ejects the service), or an HTTP healthCheck if the servers answer HTTP; Envoy's cluster health checks do not help here: override_host sends a request to the address hashlb names even when Envoy marks it unhealthy",
				"ns.conf:10: warning: healthCheck from lb monitor m2, bound to 2 of its 3 services; hashlb probes every service of a configuration with one check: c: bound to m3 (TCP), m1 (HTTP-ECV), probed with m2's check instead",
				"ns.conf:16: not translated: bind service c: lb monitor m3 (ns.conf:9) is not translated",
				"ns.conf:17: not translated: bind service c: lb monitor m1 (ns.conf:7) is not translated",
			},
			out: map[string][]string{"v.json": {`"healthCheck": {"path": "/ready", "host": "h.example", "interval": "2m", "timeout": "1m", "healthyThreshold": 10, "unhealthyThreshold": 3, "expectedStatuses": "200-204,301"}`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, rep := translateText(t, tt.src, "")
			if res.Failed() != tt.failed {
				t.Errorf("Failed() = %v, want %v\n%s", res.Failed(), tt.failed, rep)
			}
			lines := strings.Split(rep, "\n")
			for _, want := range tt.report {
				found := false
				for _, l := range lines {
					found = found || l == want
				}
				if !found {
					t.Errorf("report lacks %q:\n%s", want, rep)
				}
			}
			got := map[string]string{}
			for _, o := range res.Outputs {
				got[o.File] = string(o.JSON)
			}
			for file, wants := range tt.out {
				js, ok := got[file]
				if wants == nil {
					if ok {
						t.Errorf("%s written, want none:\n%s", file, js)
					}
					continue
				}
				if !ok {
					t.Errorf("%s not written:\n%s", file, rep)
				}
				for _, w := range wants {
					if !strings.Contains(js, w) {
						t.Errorf("%s lacks %s:\n%s", file, w, js)
					}
				}
			}
		})
	}
}

// TestTranslateVServer: -vserver writes one configuration and lists only the
// lines about it (and the global ones); a failure elsewhere does not fail it.
func TestTranslateVServer(t *testing.T) {
	src := servers + "add service a s1 HTTP 80\nadd service b s2 HTTP 80\n" +
		"add lb vserver v HTTP -lbMethod URLHASH\nadd lb vserver w HTTP\nbind lb vserver v a\nbind lb vserver w b\nbind lb vserver w nope\n"
	tests := []struct {
		name    string
		vserver string
		failed  bool
		files   []string
		lines   []int
	}{
		{name: "the file", failed: true, files: []string{"v.json", "w.json"}, lines: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{name: "a vserver whose lines are fine", vserver: "v", files: []string{"v.json"}, lines: []int{1, 4, 6, 8}},
		{name: "a vserver with a failed line", vserver: "w", failed: true, files: []string{"w.json"}, lines: []int{2, 5, 7, 9, 10}},
		{name: "no such vserver", vserver: "x", failed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, rep := translateText(t, src, tt.vserver)
			var files []string
			for _, o := range res.Outputs {
				files = append(files, o.File)
			}
			var lines []int
			for _, e := range res.shown() {
				lines = append(lines, e.Line)
			}
			if res.Failed() != tt.failed || strings.Join(files, ",") != strings.Join(tt.files, ",") || !equalInts(lines, tt.lines) {
				t.Errorf("Translate(-vserver %q): failed %v, files %v, lines %v; want %v, %v, %v\n%s",
					tt.vserver, res.Failed(), files, lines, tt.failed, tt.files, tt.lines, rep)
			}
			if tt.vserver == "x" && !strings.Contains(rep, `ns.conf: no lb vserver named "x" (the file has: v, w)`) {
				t.Errorf("report does not name the vservers:\n%s", rep)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTranslateLineEndings: CRLF line ends and a UTF-8 byte order mark, as
// files copied off Windows have, read like plain lines.
func TestTranslateLineEndings(t *testing.T) {
	src := "\xef\xbb\xbfadd server s1 192.0.2.1\r\nadd service a s1 HTTP 80\r\n\r\nadd lb vserver v HTTP -lbMethod URLHASH\r\nbind lb vserver v a\r\n"
	res, rep := translateText(t, src, "")
	if res.Failed() || len(res.Outputs) != 1 || !strings.Contains(rep, "ns.conf:5: translated: bind lb vserver v a\n") {
		t.Errorf("CRLF file: failed %v, %d outputs\n%s", res.Failed(), len(res.Outputs), rep)
	}
}

// TestTranslateDeterministic: the same input gives the same bytes.
func TestTranslateDeterministic(t *testing.T) {
	src := "set lb parameter -useportforhashlb NO\n" + servers +
		"add serviceGroup sg HTTP\nbind serviceGroup sg s1 80\nbind serviceGroup sg s2 80\nbind serviceGroup sg s3 80\n" +
		"add service a s1 HTTP 81\nadd lb vserver v HTTP -lbMethod TOKEN -rule \"HTTP.REQ.HEADER(\\\"a\\\") ALT CLIENT.IP.SRC\" -persistenceType SOURCEIP -persistMask 255.255.0.0\n" +
		"bind lb vserver v sg\nbind lb vserver v a\n"
	first, firstRep := translateText(t, src, "")
	for i := 0; i < 20; i++ {
		again, rep := translateText(t, src, "")
		if rep != firstRep || len(again.Outputs) != len(first.Outputs) || !bytes.Equal(again.Outputs[0].JSON, first.Outputs[0].JSON) {
			t.Fatalf("run %d differs:\n%s\n%s\nfirst:\n%s\n%s", i, rep, again.Outputs[0].JSON, firstRep, first.Outputs[0].JSON)
		}
	}
}

// TestMonitorRequestLines: the request lines of -httpRequest and -send that
// translate, and those that do not, with why.
func TestMonitorRequestLines(t *testing.T) {
	tests := []struct {
		name, req               string
		method, path, host, why string
	}{
		{name: "HEAD", req: "HEAD /keepAlive.html", method: "HEAD", path: "/keepAlive.html"},
		{name: "with a version", req: "GET /status HTTP/1.1", method: "GET", path: "/status"},
		{name: "lower-case method", req: "get /", method: "GET", path: "/"},
		{name: "Host in the request", req: `GET /s HTTP/1.1\r\nHost: app.example.com\r\n`, method: "GET", path: "/s", host: "app.example.com"},
		{name: "POST", req: "POST /login", why: "method POST: hashlb's probe sends GET or HEAD"},
		{name: "no path", req: "GET", why: "want METHOD /path [HTTP/1.1]"},
		{name: "relative path", req: "GET status", why: `"status" is not an absolute path`},
		{name: "non-ASCII path", req: "GET /état", why: "non-ASCII byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path, host, _, why := parseHTTPRequest(tt.req)
			if tt.why != "" {
				if !strings.Contains(why, tt.why) {
					t.Errorf("parseHTTPRequest(%q): why %q, want one containing %q", tt.req, why, tt.why)
				}
				return
			}
			if why != "" || method != tt.method || path != tt.path || host != tt.host {
				t.Errorf("parseHTTPRequest(%q) = %s %s host %q (%s), want %s %s host %q", tt.req, method, path, host, why, tt.method, tt.path, tt.host)
			}
		})
	}
}
