package nsconf

import "strings"

// The commands this importer reads, and every flag the NetScaler command
// reference gives them. The flags come from the reference's synopses:
//
//   - add/set lb vserver: the NITRO lbvserver resource
//     (https://apis.io/schemas/citrix-netscaler/citrix-netscaler-nitro-lb-vserver/ and the
//     apidoc of build 14.1-60.57, setlbvserver_*.html at
//     https://ksptools.ca/Public/build-14.1-60.57_nc_64.tgz:/tmp/tarfile_extract_3nav1ic0/apidoc/docs/);
//   - add serviceGroup, bind serviceGroup: "serviceGroup" in the command reference
//     (https://citrix-landing-page.readthedocs-hosted.com/projects/netscaler-command-reference/en/12.0/basic/servicegroup/servicegroup
//     and https://developer-docs.netscaler.com/en-us/adc-command-reference-int/current-release/basic/servicegroup);
//   - add service: the NITRO service resource
//     (https://developer-docs.citrix.com/projects/citrix-adc-nitro-api-reference/en/latest/configuration/basic/service/);
//   - set lb parameter: "lb-parameter" in the command reference
//     (https://developer-docs.netscaler.com/en-us/adc-command-reference-int/current-release/lb/lb-parameter).
//
// A flag is one of three kinds. flagUse flags are translated. flagQuiet flags
// configure the connection, the listener or the appliance, never which
// service a request goes to (timeouts, profiles, client-IP headers, AppFlow,
// comments): they are accepted and not reported, since hashlb leaves those
// to Envoy. flagWarn flags change which service is chosen or whether a request
// is served, and hashlb has nothing like them: each use is a warning saying
// why (unless its value is one that turns the feature off). A flag that is
// in none of the lists is an error: the line is not understood.

type flagKind uint8

const (
	flagUse flagKind = iota
	flagQuiet
	flagWarn
	flagUseN // translated, one value or more
)

type flagSpec struct {
	name string // spelling of the reference, for messages
	kind flagKind
	// why, for flagWarn: what hashlb lacks.
	why string
	// off, for flagWarn: upper-case values that leave the feature off, not
	// warned about.
	off []string
}

type flagSet map[string]flagSpec

// add returns s with names added as kind (why and off for flagWarn).
func (s flagSet) add(kind flagKind, why string, off []string, names ...string) flagSet {
	for _, n := range names {
		s[strings.ToLower(n)] = flagSpec{name: n, kind: kind, why: why, off: off}
	}
	return s
}

func (s flagSet) use(names ...string) flagSet   { return s.add(flagUse, "", nil, names...) }
func (s flagSet) quiet(names ...string) flagSet { return s.add(flagQuiet, "", nil, names...) }
func (s flagSet) useN(names ...string) flagSet  { return s.add(flagUseN, "", nil, names...) }
func (s flagSet) warn(why string, off []string, names ...string) flagSet {
	return s.add(flagWarn, why, off, names...)
}

// Warnings shared by several commands.
const (
	whyMaxClient   = "hashlb has no per-service connection or request limit (use Envoy's circuit breakers)"
	whyAutoScale   = "members resolved from DNS or a cloud API are not translated: hashlb needs each service's ip:port"
	whyPolicy      = "lb policies are not translated: hashlb has no request policies (use Envoy routes)"
	whyMonitorBind = "lb monitor bindings are not translated: add a healthCheck by hand"
)

// serviceQuiet are the flags of add service and add serviceGroup that set up
// the connection to the server.
func serviceQuiet(s flagSet) flagSet {
	return s.quiet("-cacheType", "-maxReq", "-cacheable", "-cip", "-usip", "-pathMonitor", "-pathMonitorIndv",
		"-useproxyport", "-sc", "-sp", "-rtspSessionidRemap", "-cltTimeout", "-svrTimeout", "-CKA", "-TCPB", "-CMP",
		"-monThreshold", "-downStateFlush", "-tcpProfileName", "-httpProfileName", "-comment", "-appflowLog",
		"-netProfile", "-td", "-processLocal", "-dnsProfileName", "-monConnectionClose",
		"-contentInspectionProfileName", "-devno", "-CustomServerID", "-serverID", "-accessDown", "-gslb",
		"-clearTextPort", "-cipHeader", "-graceful", "-delay").
		warn(whyMaxClient, []string{"0"}, "-maxClient", "-maxBandwidth")
}

var (
	addServerFlags = flagSet{}.use("-state").
			quiet("-comment", "-td", "-translationIp", "-translationMask", "-ipv6address", "-domainResolveRetry",
			"-querytype", "-domainResolveNow", "-devno", "-delay", "-graceful")

	addServiceFlags = serviceQuiet(flagSet{}.use("-state", "-hashId", "-healthMonitor"))

	addGroupFlags = serviceQuiet(flagSet{}.use("-state", "-healthMonitor")).
			quiet("-memberPort", "-autoDisablegraceful", "-autoDisabledelay", "-bootstrap").
			warn(whyAutoScale, []string{"DISABLED"}, "-autoScale")

	bindGroupFlags = flagSet{}.use("-weight", "-hashId", "-state").
			quiet("-CustomServerID", "-serverId", "-dbsTTL", "-devno").
			use("-monitorName", "-monState", "-passive").
			warn("selection order (-order with -toggleorder) is not translated: hashlb ranks by hash or load only", nil, "-order").
			warn(whyAutoScale, nil, "-nameServer")

	// lbVserverFlags serve add lb vserver and set lb vserver.
	lbVserverFlags = flagSet{}.
			use("-lbMethod", "-hashLength", "-netmask", "-v6netmasklen", "-backupLBMethod", "-rule",
			"-persistenceType", "-persistMask", "-v6persistmasklen", "-timeout", "-state",
			"-cookieName", "-cookieDomain", "-httpOnlyCookieFlag", "-persistenceBackup", "-backupPersistenceTimeout",
						"-newServiceRequestIncrementInterval").
		useN("-newServiceRequest"). // N [PER_SECOND|PERCENT]
		// The listener, the connection and the appliance: Envoy's side.
		quiet("-range", "-IPPattern", "-IPMask", "-IPset", "-td", "-comment", "-cltTimeout", "-appflowLog",
			"-tcpProfileName", "-httpProfileName", "-dbProfileName", "-netProfile", "-dnsProfileName",
			"-quicBridgeProfilename", "-adfsProxyProfile", "-authnProfile", "-Authentication", "-AuthenticationHost",
			"-authn401", "-authnVsName", "-push", "-pushVserver", "-pushLabel", "-pushMultiClients", "-cacheable",
			"-insertVserverIPPort", "-redirectPortRewrite", "-downStateFlush", "-rtspNat", "-l2Conn",
			"-icmpVsrResponse", "-RHIstate", "-macmodeRetainvlan", "-dns64", "-bypassAAAA", "-RecursionAvailable",
			"-processLocal", "-retainConnectionsOnCluster", "-redirectFromPort", "-httpsRedirectUrl",
			"-oracleServerVersion", "-mssqlServerVersion", "-mysqlProtocolVersion", "-mysqlServerVersion",
			"-mysqlCharacterSet", "-mysqlServerCapabilities", "-lbprofilename", "-devno", "-pq", "-sc",
			"-trofsPersistence").
		warn("response rules are not translated: hashlb keys persistence on the request only", []string{"NONE"}, "-resRule").
		warn("backup vservers, spillover and redirects when DOWN are not translated: configure Envoy's fallback by hand", []string{"DISABLED", "NONE"},
			"-backupVServer", "-redirectURL", "-disablePrimaryOnDown", "-soMethod", "-soThreshold", "-soPersistence",
			"-soPersistenceTimeOut", "-soBackupAction", "-healthThreshold").
		warn("per-request balancing of UDP or MAC-mode forwarding is not translated: hashlb balances HTTP requests", []string{"DISABLED", "IP"},
			"-sessionless", "-m", "-tosId", "-connfailover").
		warn("TOKEN's -dataLength/-dataOffset read the TCP payload, which hashlb does not read (as an HTTP filter it sees requests, as a network filter only the connection's addresses)", nil, "-dataLength", "-dataOffset").
		warn(whyAutoScale, nil, "-minAutoscaleMembers", "-maxAutoscaleMembers").
		warn("skipping persistence and per-AVP persistence are not translated", []string{"NONE"}, "-skippersistency", "-persistAVPno").
		warn("listen policies are not translated: Envoy's routes decide which requests reach this configuration", []string{"NONE"}, "-listenPolicy", "-listenPriority").
		warn("selection order (-toggleorder) is not translated: hashlb ranks by hash or load only", nil, "-toggleorder", "-orderthreshold").
		warn("database-specific load balancing is not translated", []string{"DISABLED"}, "-dbsLb").
		warn("the vserver's own probe is not translated: add a healthCheck by hand", nil, "-probeProtocol", "-probeSuccessResponseCode", "-probePort")

	bindLBVserverFlags = flagSet{}.use("-weight").
				warn(whyPolicy, nil,
			"-policyName", "-priority", "-gotoPriorityExpression", "-type", "-invoke", "-labelType", "-labelName").
		quiet("-analyticsProfile", "-devno").
		warn(whyMonitorBind, nil, "-monitorName")

	lbParameterFlags = flagSet{}.use("-usePortForHashLb").
				quiet("-httpOnlyCookieFlag", "-useEncryptedPersistenceCookie", "-useSecuredPersistenceCookie",
			"-cookiePassphrase", "-consolidatedLConn", "-preferDirectRoute", "-monitorSkipMaxClient",
			"-monitorConnectionClose", "-vServerSpecificMac", "-AllowBoundSvcRemoval", "-retainservicestate",
			"-dbsTTL", "-maxPipelineNat", "-LiteralADCCookieAttribute", "-ComputedADCCookieAttribute",
			"-storeMqttClientidAndUsername", "-dropMqttJumboMessage", "-sessionsThreshold", "-undefAction",
			"-proximityFromSelf", "-devno").
		warn("hashlb ranks services by rendezvous hashing (the DEFAULT algorithm of the hashing methods page); PRAC and JARH are not translated",
			[]string{"DEFAULT"}, "-lbHashAlgorithm", "-lbHashFingers").
		warn("the startup round-robin factor is not translated: least connection starts at once", []string{"0"}, "-startupRRFactor")

	policyExpressionFlags = flagSet{}.quiet("-comment", "-clientSecurityMessage", "-type", "-devno")
)

// command is one command this importer translates.
type command struct {
	words          []string // lower-case command words: "add", "lb", "vserver"
	about          byte     // what its first positional names: a ref kind
	minPos, maxPos int      // positional arguments after the words
	flags          flagSet
	run            func(t *translator, c *cmdLine)
	// lenient: a flag in none of flags' lists is a warning, not an error
	// (lb monitors have a hundred type-specific flags).
	lenient bool
}

var commands = []command{
	{words: []string{"add", "server"}, about: 'h', minPos: 2, maxPos: 2, flags: addServerFlags, run: (*translator).addServer},
	{words: []string{"add", "service"}, about: 's', minPos: 4, maxPos: 4, flags: addServiceFlags, run: (*translator).addService},
	{words: []string{"add", "servicegroup"}, about: 's', minPos: 2, maxPos: 2, flags: addGroupFlags, run: (*translator).addGroup},
	{words: []string{"bind", "servicegroup"}, about: 's', minPos: 1, maxPos: 3, flags: bindGroupFlags, run: (*translator).bindGroup},
	{words: []string{"add", "lb", "vserver"}, about: 'v', minPos: 2, maxPos: 4, flags: lbVserverFlags, run: (*translator).addVserver},
	{words: []string{"set", "lb", "vserver"}, about: 'v', minPos: 1, maxPos: 1, flags: lbVserverFlags, run: (*translator).setVserver},
	{words: []string{"disable", "lb", "vserver"}, about: 'v', minPos: 1, maxPos: 1, flags: flagSet{}, run: (*translator).disableVserver},
	{words: []string{"enable", "lb", "vserver"}, about: 'v', minPos: 1, maxPos: 1, flags: flagSet{}, run: (*translator).enableVserver},
	{words: []string{"bind", "lb", "vserver"}, about: 'v', minPos: 1, maxPos: 2, flags: bindLBVserverFlags, run: (*translator).bindVserver},
	{words: []string{"set", "lb", "parameter"}, about: 'g', minPos: 0, maxPos: 0, flags: lbParameterFlags, run: (*translator).setLBParameter},
	{words: []string{"add", "policy", "expression"}, about: 'x', minPos: 2, maxPos: 2, flags: policyExpressionFlags, run: (*translator).addPolicyExpression},
	{words: []string{"add", "lb", "monitor"}, about: 'm', minPos: 2, maxPos: 2, flags: monitorFlags, run: (*translator).addMonitor, lenient: true},
	{words: []string{"set", "lb", "monitor"}, about: 'm', minPos: 1, maxPos: 2, flags: monitorFlags, run: (*translator).setMonitor, lenient: true},
	{words: []string{"bind", "lb", "monitor"}, about: 'm', minPos: 2, maxPos: 2, flags: bindMonitorFlags, run: (*translator).bindService},
	{words: []string{"bind", "service"}, about: 's', minPos: 1, maxPos: 1, flags: bindServiceFlags, run: (*translator).bindService},
}

// notTranslated are load-balancing commands hashlb has no equivalent for,
// with why; a command starting with these words is reported as not
// translated.
var notTranslated = []struct {
	words []string
	why   string
}{
	{[]string{"add", "lb", "group"}, "lb groups (persistence shared across vservers) are not translated: each hashlb configuration keeps its own table"},
	{[]string{"set", "lb", "group"}, "lb groups (persistence shared across vservers) are not translated: each hashlb configuration keeps its own table"},
	{[]string{"bind", "lb", "group"}, "lb groups (persistence shared across vservers) are not translated: each hashlb configuration keeps its own table"},
	{[]string{"add", "lb", "policy"}, whyPolicy},
	{[]string{"add", "lb", "action"}, "lb actions are not translated: hashlb has no request policies (use Envoy routes)"},
	{[]string{"add", "lb", "route"}, "lb routes are not translated"},
	{[]string{"add", "lb", "metrictable"}, "custom load metrics are not translated: hashlb sees active requests only"},
	{[]string{"bind", "lb", "metrictable"}, "custom load metrics are not translated: hashlb sees active requests only"},
	{[]string{"add", "lb", "profile"}, "lb profiles are not translated"},
	{[]string{"set", "lb", "profile"}, "lb profiles are not translated"},
	{[]string{"set", "lb", "sipparameters"}, "SIP parameters are not translated"},
	{[]string{"add", "lb", "wlm"}, "workload managers are not translated"},
	{[]string{"bind", "lb", "wlm"}, "workload managers are not translated"},
	{[]string{"set", "service"}, "set service is not translated: put the settings on its add service line"},
	{[]string{"set", "servicegroup"}, "set serviceGroup is not translated: put the settings on its add serviceGroup line"},
	{[]string{"set", "server"}, "set server is not translated: put the settings on its add server line"},
	{[]string{"disable", "service"}, "disable service is not translated: use -state DISABLED on its add service line"},
	{[]string{"disable", "servicegroup"}, "disable serviceGroup is not translated: use -state DISABLED"},
	{[]string{"disable", "server"}, "disable server is not translated: use -state DISABLED on its add server line"},
	{[]string{"unbind", "lb", "vserver"}, "unbind is not translated: remove the bind line"},
	{[]string{"unset", "lb", "vserver"}, "unset lb vserver is not translated: remove the flag from the add line"},
}

// ignoredObjects names, for an object word after the verb, why a line about
// it is not load balancing. Any other object not listed here and not a
// command above is ignored as "not load balancing" too; these only give a
// better reason.
var ignoredObjects = map[string]string{
	"cs":   "content switching, not load balancing: route to each lb vserver's configuration with Envoy routes",
	"gslb": "global server load balancing (DNS), not local load balancing",
	"ssl":  "TLS settings: Envoy terminates TLS",
	"ns":   "appliance settings, not load balancing",
}
