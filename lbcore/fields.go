package lbcore

// FieldSpec describes one configuration field: its JSON path, type, default
// and range. Fields publishes the validator's rules so that configs/schema.json
// (for editors) can be checked against them; a test keeps the two in step.
type FieldSpec struct {
	// Path is the JSON path: "hashLength", "services[].weight", "persistence.tableSize".
	Path string
	// Type is the JSON Schema type: "string", "integer", "boolean", "array" or "object".
	Type string
	// Format refines strings: "duration", "expression", "netmask", "statuses",
	// "address", "header", "method", or "".
	Format string
	// Default is the value used when the field is absent; nil when none.
	Default any
	// Min and Max bound integers, array lengths (int) and durations ("10m"); nil when none.
	Min, Max any
	// Enum lists the allowed strings (case-insensitive for methods).
	Enum []string
	// Required is true for a field that must be present (within its object).
	Required bool
}

// Fields returns every configuration field, in the order the README lists them.
func Fields() []FieldSpec {
	return []FieldSpec{
		{Path: "lbMethod", Type: "string", Format: "method", Default: "ROUNDROBIN", Enum: Methods()},
		{Path: "hashLength", Type: "integer", Default: defaultHashLength, Min: 1, Max: maxHashLength},
		{Path: "netmask", Type: "string", Format: "netmask", Default: "255.255.255.255"},
		{Path: "v6NetmaskLen", Type: "integer", Default: 128, Min: 1, Max: 128},
		{Path: "token", Type: "string", Format: "expression"},
		{Path: "backupLBMethod", Type: "string", Format: "method", Default: "LEASTCONNECTION", Enum: backupMethods()},
		{Path: "services", Type: "array", Min: 1, Max: maxServices, Required: true},
		{Path: "services[].name", Type: "string", Required: true},
		{Path: "services[].address", Type: "string", Format: "address", Required: true},
		{Path: "services[].weight", Type: "integer", Default: 1, Min: 1, Max: maxWeight},
		{Path: "services[].enabled", Type: "boolean", Default: true},
		{Path: "services[].hashId", Type: "string"},
		{Path: "persistence", Type: "object"},
		{Path: "persistence.keys", Type: "array", Format: "expression", Min: 1, Max: maxPersistenceKeys, Required: true},
		{Path: "persistence.tableSize", Type: "integer", Default: defaultTableSize, Min: minTableSize, Max: maxTableSize},
		{Path: "persistence.expire", Type: "string", Format: "duration", Default: "7d", Min: FormatDuration(minExpire), Max: FormatDuration(maxExpire)},
		{Path: "persistence.emptyKey", Type: "string", Default: "skip", Enum: []string{"skip", "shared"}},
		{Path: "healthCheck", Type: "object"},
		{Path: "healthCheck.path", Type: "string", Default: "/healthz"},
		{Path: "healthCheck.interval", Type: "string", Format: "duration", Default: "5s", Min: "1s", Max: "1h"},
		{Path: "healthCheck.timeout", Type: "string", Format: "duration", Default: "2s", Min: "100ms", Max: "1m"},
		{Path: "healthCheck.healthyThreshold", Type: "integer", Default: 2, Min: 1, Max: 10},
		{Path: "healthCheck.unhealthyThreshold", Type: "integer", Default: 3, Min: 1, Max: 10},
		{Path: "healthCheck.expectedStatuses", Type: "string", Format: "statuses", Default: "200-399"},
		{Path: "healthCheck.cluster", Type: "string", Default: "hashlb_upstream"},
		{Path: "passiveHealth", Type: "object"},
		{Path: "passiveHealth.consecutiveFailures", Type: "integer", Default: 5, Min: 1, Max: 1000},
		{Path: "passiveHealth.ejectionTime", Type: "string", Format: "duration", Default: "30s", Min: "1s", Max: "1h"},
		{Path: "passiveHealth.failureStatuses", Type: "string", Format: "statuses", Default: "502-504"},
		{Path: "upstreamHeader", Type: "string", Format: "header", Default: defaultUpstreamHdr},
		{Path: "upstreamCount", Type: "integer", Default: 1, Min: 1, Max: maxUpstreamCount},
		{Path: "serviceHeader", Type: "string", Format: "header", Default: defaultServiceHdr},
		{Path: "trustedForwardedHops", Type: "integer", Default: 0, Min: 0, Max: maxForwardedHops},
		{Path: "hashBalanceFactor", Type: "integer", Default: 0, Min: 0, Max: maxBalanceFactor},
		{Path: "debugHeader", Type: "boolean", Default: false},
	}
}
