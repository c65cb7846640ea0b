// Command benchfmt is the helper of compare.sh: it turns the -json output
// of one walq-bench run into a line in Go benchmark format, and reads
// benchstat's CSV comparison back to say, for each figure, whether higher
// or lower is better and whether it got worse.
//
// Usage:
//
//	benchfmt line NAME RESULT.json   print "BenchmarkNAME 1 <value> <unit> ..."
//	benchfmt verdict [-alpha A] BENCHSTAT.csv
//
// line reads the JSON loosely, by field path, so that it also reads the
// output of older revisions; a figure whose field is missing is left out
// with a warning on stderr. It warns too when a delay run delivered an item
// early, which walq promises never to do.
package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "line":
		if len(os.Args) != 4 {
			usage()
		}
		err = line(os.Args[2], os.Args[3], os.Stdout, os.Stderr)
	case "verdict":
		err = verdict(os.Args[2:], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchfmt:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchfmt line NAME RESULT.json\n       benchfmt verdict [-alpha A] BENCHSTAT.csv")
	os.Exit(2)
}

// higherBetter tells, for every unit line writes, whether a larger value
// is an improvement.
var higherBetter = map[string]bool{
	"puts/s":        true,
	"items/s":       true,
	"x-ceiling":     true, // walq's records (put) or items (cycle) per second over the disk's ceiling
	"put-p50-µs":    false,
	"put-p99-µs":    false,
	"get-p50-µs":    false,
	"get-p99-µs":    false,
	"ack-p50-µs":    false,
	"ack-p99-µs":    false,
	"over-fsync-µs": false, // put p50 minus the disk's serial fsync p50
	"ready-ms":      false, // recover: Open until the first Get returns
	"span-B/item":   false, // mem: in-use spans per item beyond its body
	"obj-B/item":    false, // mem: live objects per item beyond its body
	"late-p50-µs":   false, // delay: delivered − due
	"late-p99-µs":   false,
	"early":         false, // delay: deliveries before the due time (must be 0)
	"p99-ratio":     false, // compact: put p99 with compaction over without
	"disk-of-limit": false, // compact: disk after over 2 × live + 2 segments
}

// figure is one value to take from a result: the unit it is reported in,
// the JSON path of its field, and a factor.
type figure struct {
	unit  string
	path  string
	scale float64
}

func figures(res map[string]any) ([]figure, error) {
	workload, _ := lookup(res, "workload").(string)
	producers, _ := lookup(res, "config.producers").(float64)
	sync, _ := lookup(res, "config.sync").(string)
	latencies := func(prefix string, ops ...string) []figure {
		var fs []figure
		for _, op := range ops {
			if lookup(res, prefix+".latency."+op) == nil {
				continue // get and ack are timed on the plain path only
			}
			fs = append(fs,
				figure{op + "-p50-µs", prefix + ".latency." + op + ".p50_us", 1},
				figure{op + "-p99-µs", prefix + ".latency." + op + ".p99_us", 1})
		}
		return fs
	}
	switch workload {
	case "put":
		fs := []figure{{"puts/s", "run.items_per_sec", 1}}
		fs = append(fs, latencies("run", "put")...)
		if producers == 1 {
			fs = append(fs, figure{"over-fsync-µs", "ceiling.put_p50_over_fsync_us", 1})
		} else {
			fs = append(fs, figure{"x-ceiling", "ceiling.records_ratio", 1})
		}
		return fs, nil
	case "cycle":
		fs := []figure{{"items/s", "run.items_per_sec", 1}}
		if sync == "always" { // the ceiling is of fsynced appends
			fs = append(fs, figure{"x-ceiling", "ceiling.items_ratio", 1})
		}
		// e2e is left out: in an unbounded cycle it is mostly time queued.
		return append(fs, latencies("run", "put", "get", "ack")...), nil
	case "recover":
		return []figure{{"ready-ms", "recover.ready_seconds", 1000}}, nil
	case "mem":
		return []figure{{"span-B/item", "mem.per_item_bytes", 1}, {"obj-B/item", "mem.per_item_alloc_bytes", 1}}, nil
	case "delay":
		return []figure{
			{"late-p50-µs", "delay.lateness.p50_us", 1},
			{"late-p99-µs", "delay.lateness.p99_us", 1},
			{"early", "delay.early", 1},
		}, nil
	case "compact":
		return []figure{
			{"p99-ratio", "compact.p99_ratio", 1},
			{"items/s", "compact.with.items_per_sec", 1},
			{"disk-of-limit", "", 1}, // computed in line
		}, nil
	}
	return nil, fmt.Errorf("unknown workload %q", workload)
}

// lookup follows a dotted path through decoded JSON; nil if it is absent.
func lookup(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func number(res map[string]any, path string) (float64, bool) {
	f, ok := lookup(res, path).(float64)
	return f, ok
}

func line(name, file string, stdout, stderr io.Writer) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var res map[string]any
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: not a walq-bench -json result: %v", file, err)
	}
	fs, err := figures(res)
	if err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "Benchmark%s 1", name)
	n := 0
	for _, f := range fs {
		var v float64
		var ok bool
		if f.unit == "disk-of-limit" {
			var log, snap, limit float64
			log, ok = number(res, "compact.disk_after.log_bytes")
			snap, _ = number(res, "compact.disk_after.snapshot_bytes")
			limit, _ = number(res, "compact.limit_after")
			ok = ok && limit > 0
			if ok {
				v = (log + snap) / limit
			}
		} else {
			v, ok = number(res, f.path)
		}
		if !ok {
			fmt.Fprintf(stderr, "warning: %s: no %s (field %s) in this revision's output\n", file, f.unit, f.path)
			continue
		}
		fmt.Fprintf(&out, " %s %s", strconv.FormatFloat(v*f.scale, 'g', 6, 64), f.unit)
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s: none of the %s figures found", file, name)
	}
	if early, ok := number(res, "delay.early"); ok && early > 0 {
		fmt.Fprintf(stderr, "WARNING: %s: %.0f items delivered before they were due\n", file, early)
	}
	if fst, _ := lookup(res, "machine.fs_type").(string); fst == "tmpfs" {
		fmt.Fprintf(stderr, "WARNING: %s: ran on tmpfs, where fsync costs nothing\n", file)
	}
	_, err = fmt.Fprintln(stdout, out.String())
	return err
}

// verdict reads benchstat -format csv output of two files: tables of
// ",old,,new,,," / ",UNIT,CI,UNIT,CI,vs base,P" / rows / "geomean,...",
// separated by blank lines.
func verdict(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("verdict", flag.ContinueOnError)
	alpha := fs.Float64("alpha", 0.05, "significance level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("verdict wants one benchstat CSV file")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	records, err := r.ReadAll()
	if err != nil {
		return fmt.Errorf("benchstat CSV: %v", err)
	}

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tbetter\told median\tnew median\tchange\tp\tn\tverdict\t")
	var unit string
	var worse, better []string
	compared := 0
	for _, rec := range records {
		switch {
		case len(rec) < 7:
			continue // blank separator
		case rec[0] == "" && rec[5] == "vs base":
			unit = rec[1]
			continue
		case rec[0] == "" || rec[0] == "geomean":
			continue
		}
		name := rec[0]
		dir, known := higherBetter[unit]
		dirText := "?"
		if known {
			dirText = map[bool]string{true: "higher", false: "lower"}[dir]
		}
		oldV, errOld := strconv.ParseFloat(rec[1], 64)
		newV, errNew := strconv.ParseFloat(rec[3], 64)
		oldText, newText, change := rec[1], rec[3], ""
		if errOld == nil && errNew == nil {
			oldText, newText = short(oldV), short(newV)
			switch {
			case oldV == newV:
				change = "0"
			case oldV > 0:
				change = fmt.Sprintf("%+.1f%%", (newV-oldV)/oldV*100)
			default: // a percentage of a base at or below 0 means nothing
				change = fmt.Sprintf("Δ %+.4g", newV-oldV)
			}
		}
		p, n := parseP(rec[6])
		v := "~"
		switch {
		case errOld != nil || errNew != nil:
			v = "missing"
		case p < 0:
			v = "no test"
		case p < *alpha && newV != oldV && known:
			if (newV > oldV) == dir {
				v = "better"
				better = append(better, name+" "+unit)
			} else {
				v = "WORSE"
				worse = append(worse, name+" "+unit)
			}
		case p < *alpha && newV != oldV:
			v = "changed"
		}
		if v != "missing" {
			compared++
		}
		pText := "-"
		if p >= 0 {
			pText = fmt.Sprintf("%.3f", p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, unit, dirText, oldText, newText, change, pText, n, v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if len(better) > 0 {
		fmt.Fprintf(stdout, "better with p < %g: %s\n", *alpha, strings.Join(better, ", "))
	}
	if len(worse) > 0 {
		fmt.Fprintf(stdout, "verdict: %d of %d figures WORSE with p < %g: %s\n", len(worse), compared, *alpha, strings.Join(worse, ", "))
	} else {
		fmt.Fprintf(stdout, "verdict: no figure worse with p < %g (%d figures compared)\n", *alpha, compared)
	}
	return nil
}

// short prints a median with 4 significant digits, in full below 10,000.
func short(v float64) string {
	if a := math.Abs(v); a >= 1000 && a < 1e7 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// parseP reads benchstat's "p=0.002 n=6" (or "n=6+5"); p is -1 if absent.
func parseP(s string) (p float64, n string) {
	p = -1
	for _, f := range strings.Fields(s) {
		switch {
		case strings.HasPrefix(f, "p="):
			if v, err := strconv.ParseFloat(f[2:], 64); err == nil {
				p = v
			}
		case strings.HasPrefix(f, "n="):
			n = f[2:]
		}
	}
	return p, n
}
