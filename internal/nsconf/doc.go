// Package nsconf translates NetScaler (Citrix ADC) configuration, as
// "save ns config" writes it to ns.conf, into hashlb plugin configurations:
// one per load-balancing vserver ("add lb vserver"), each checked with
// lbcore.ParseConfig before it is returned. It is the engine of
// "hashlb import-nsconf" and imports the standard library and lbcore only.
//
// The file is replayed line by line, in order, as the appliance would replay
// it: servers, services and service groups, vservers, binds, set lines. A
// line names only what earlier lines added; a line that fails adds nothing,
// and the rest of the file is still read. Every non-blank line gets an Entry
// in the report: translated, ignored (not load balancing), ignored
// (built-in: the appliance's own objects), not translated (load balancing
// hashlb has no equivalent for) or failed, with the reason,
// and warnings for what was translated approximately (the nearest method, a
// clamped value) or dropped. Nothing is guessed: a flag, value or expression
// not understood is reported with its line and the part not understood.
//
// Its parts, by file: Translate, the report and its statuses (report.go); the
// replay of the file's lines, each matched to a command and its flags
// (translate.go), split into words as the CLI reads them (lex.go), a command
// a copy wrapped joined again (join.go); each vserver written as a
// configuration (build.go), its values clamped to the ranges of lbcore's field
// table (ranges.go).
//
// The NetScaler facts relied on, and where they come from:
//
//   - command and flag synopses: commands.go (the command reference and the
//     NITRO API reference pages cited there);
//   - LEASTCONNECTION is the default method; the method list:
//     https://docs.netscaler.com/en-us/citrix-adc/13/load-balancing/load-balancing-customizing-algorithms
//     and the NITRO apidoc's setlbvserver_lbmethod (build 14.1-60.57);
//   - the persistence types: the NITRO apidoc's setlbvserver_persistencetype;
//     the timeout is in minutes, 2 by default, 2 to 1440 (0 allowed for
//     cookie insertion):
//     https://docs.citrix.com/en-us/citrix-adc/current-release/load-balancing/load-balancing-persistence/no-rule-persistence.html;
//   - -hashId replaces the IP and port in the service hash, and
//     -usePortForHashLb NO hashes the IP alone:
//     https://docs.citrix.com/en-us/citrix-adc/12-1/load-balancing/load-balancing-customizing/customize-hash-algorithm.html
//     and "lb-parameter" in the command reference;
//   - the default-syntax expressions: expr.go (the Policy Configuration and
//     Reference Guide);
//   - the monitors (HTTP and HTTP-ECV become healthCheck; the built-in ones):
//     monitor.go; what a vserver's services are monitored with when they
//     have no monitor, several, or -healthMonitor NO: vshealth.go; the
//     appliance's own services: builtin.go; backend TLS: tls.go;
//   - the hashing methods and the S1/S2/S3 failover example: the Citrix page
//     "Hashing methods"
//     (https://docs.netscaler.com/en-us/citrix-adc/13/load-balancing/load-balancing-customizing-algorithms/hashing-methods.html),
//     which lbcore implements;
//   - slow start (-newServiceRequest N [PER_SECOND|PERCENT],
//     -newServiceRequestIncrementInterval S: the increment, a request rate
//     or a percentage of the load the existing services bear, PER_SECOND by
//     default; 0 seconds, no automatic increment; for the non-hashing
//     methods only): the NITRO apidoc's setlbvserver_newservicerequest
//     (build 14.1-60.57) and the page "Gradually stepping up the load on a
//     new service with virtual server-level slow start"
//     (https://docs.citrix.com/en-us/citrix-adc/12-1/load-balancing/load-balancing-advanced-settings/slow-start-service.html);
//     build.go's slowStart says what is translated.
package nsconf
