#!/usr/bin/env bash
# compare.sh: the performance workloads of docs/performance.md, run with walq-bench built
# at two revisions, interleaved, then compared with benchstat.
#
#   cmd/walq-bench/compare.sh [-pairs N] [-quick] [-only LIST] [-out DIR] [-dir DIR] OLD_REV NEW_REV
#
# NEW_REV (or OLD_REV) may be "." for the work tree as it is. See
# cmd/walq-bench/README.md, "Comparing two revisions".
set -euo pipefail

prog=compare.sh
usage() {
	cat >&2 <<EOF
usage: $prog [-pairs N] [-quick] [-only LIST] [-out DIR] [-dir DIR] OLD_REV NEW_REV

Builds ./cmd/walq-bench at OLD_REV and NEW_REV ("." is the work tree),
runs each workload with the two binaries in turn, N pairs of runs, and
compares the figures with benchstat.

  -pairs N    pairs of runs per workload [6]; benchstat needs 4 or more
              to find a difference at p < 0.05
  -quick      tiny durations and counts: a smoke test, not a measurement
  -only LIST  comma-separated workloads [all]: $(echo "${all_workloads[@]}" | tr ' ' ',')
  -out DIR    where to keep the raw JSON, the benchmark files and the
              report [a new temporary directory]
  -dir DIR    passed to walq-bench -dir: where the queues are created
              [the OS temporary directory]; put it on the disk to measure
EOF
	exit 2
}
die() {
	echo "$prog: $*" >&2
	exit 1
}

# Workloads: name, benchmark name, full arguments, quick arguments. The full
# ones are the commands of docs/performance.md.
all_workloads=(put32 put1 cycle-work cycle-plain cycle-never recover-snapshot recover-log mem delay compact)
declare -A bench full quick
bench[put32]=Put32
full[put32]="-producers 32 -duration 5s put"
quick[put32]="-producers 32 -duration 1s -calibrate-time 200ms put"
bench[put1]=Put1
full[put1]="-producers 1 -duration 5s put"
quick[put1]="-producers 1 -duration 1s -calibrate-time 200ms put"
bench[cycle-work]=CycleWork
full[cycle-work]="-producers 16 -consumers 16 -consumer work -duration 5s cycle"
quick[cycle-work]="-producers 16 -consumers 16 -consumer work -duration 1s -calibrate-time 200ms cycle"
bench[cycle-plain]=CyclePlain
full[cycle-plain]="-producers 16 -consumers 16 -consumer plain -max-ready 1000 -duration 5s cycle"
quick[cycle-plain]="-producers 16 -consumers 16 -consumer plain -max-ready 1000 -duration 1s -calibrate-time 200ms cycle"
bench[cycle-never]=CycleNever
full[cycle-never]="-producers 16 -consumers 16 -sync never -duration 5s cycle"
quick[cycle-never]="-producers 16 -consumers 16 -sync never -duration 1s -calibrate-time 200ms cycle"
bench[recover-snapshot]=RecoverSnapshot
full[recover-snapshot]="-n 1000000 -body 32 -batch 1000 -from-snapshot recover"
quick[recover-snapshot]="-n 20000 -body 32 -batch 1000 -from-snapshot recover"
bench[recover-log]=RecoverLog
full[recover-log]="-n 1000000 -body 32 -producers 32 -sync never recover"
quick[recover-log]="-n 20000 -body 32 -producers 32 -sync never recover"
bench[mem]=Mem
full[mem]="-n 1000000 -body 32 -batch 1000 -sync never mem"
quick[mem]="-n 20000 -body 32 -batch 1000 -sync never mem"
bench[delay]=Delay
full[delay]="-sync never -n 1000 -consumers 4 delay"
quick[delay]="-sync never -n 100 -consumers 4 delay"
bench[compact]=Compact
full[compact]="-producers 16 -consumers 16 -duration 5s -compact-every 1s compact"
quick[compact]="-producers 16 -consumers 16 -duration 1s -calibrate-time 200ms -prefill 10000 -compact-every 250ms compact"

pairs=6 is_quick=0 only="" out="" qdir=""
while [ $# -gt 0 ]; do
	case "$1" in
	-pairs | --pairs) [ $# -ge 2 ] || usage; pairs=$2; shift 2 ;;
	-quick | --quick) is_quick=1; shift ;;
	-only | --only) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
	-out | --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
	-dir | --dir) [ $# -ge 2 ] || usage; qdir=$2; shift 2 ;;
	-h | -help | --help) usage ;;
	--) shift; break ;;
	-*) echo "$prog: unknown flag $1" >&2; usage ;;
	*) break ;;
	esac
done
[ $# -eq 2 ] || usage
old_rev=$1 new_rev=$2
[[ $pairs =~ ^[1-9][0-9]*$ ]] || die "-pairs $pairs: want a positive number"

workloads=("${all_workloads[@]}")
if [ -n "$only" ]; then
	IFS=, read -r -a workloads <<<"$only"
	for w in "${workloads[@]}"; do
		[ -n "${bench[$w]+x}" ] || die "-only: unknown workload \"$w\" (want some of $(echo "${all_workloads[@]}" | tr ' ' ','))"
	done
fi

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$script_dir" rev-parse --show-toplevel) || die "not in a git repository"
command -v go >/dev/null || die "go is not on PATH"

benchstat=$(command -v benchstat || true)
if [ -z "$benchstat" ]; then
	gobin=$(go env GOBIN)
	[ -n "$gobin" ] || gobin=$(go env GOPATH)/bin
	if [ ! -x "$gobin/benchstat" ]; then
		echo "installing benchstat (golang.org/x/perf/cmd/benchstat@latest)" >&2
		go install golang.org/x/perf/cmd/benchstat@latest || die "could not install benchstat"
	fi
	benchstat=$gobin/benchstat
fi

if [ -z "$out" ]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/walq-compare.XXXXXX")
else
	mkdir -p "$out"
	[ -z "$(ls -A "$out")" ] || die "-out $out is not empty"
fi
out=$(cd "$out" && pwd)
build=$(mktemp -d "${TMPDIR:-/tmp}/walq-compare-build.XXXXXX")
worktrees=()
cleanup() {
	for wt in "${worktrees[@]}"; do
		git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || true
	done
	rm -rf "$build"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# describe REV: the commit and, for ".", whether the tree has changes.
describe() {
	if [ "$1" = . ]; then
		local head dirty=""
		head=$(git -C "$repo" rev-parse --short=12 HEAD)
		[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ] || dirty=" with uncommitted changes"
		echo "work tree at $head$dirty"
	else
		git -C "$repo" log -1 --format='%h %s' "$1" | cut -c1-100
	fi
}

# build_rev LABEL REV: walq-bench at REV into $build/LABEL.
build_rev() {
	local label=$1 rev=$2 src
	if [ "$rev" = . ]; then
		src=$repo
	else
		local sha
		sha=$(git -C "$repo" rev-parse --verify --quiet "$rev^{commit}") || die "$label revision \"$rev\" is not a commit"
		src=$build/src-$label
		git -C "$repo" worktree add --detach "$src" "$sha" >/dev/null 2>&1 || die "git worktree add $src $sha failed"
		worktrees+=("$src")
	fi
	(cd "$src" && go build -o "$build/$label" ./cmd/walq-bench) || die "building ./cmd/walq-bench at $label revision \"$rev\" failed"
}

for rev in "$old_rev" "$new_rev"; do
	[ "$rev" = . ] || git -C "$repo" rev-parse --verify --quiet "$rev^{commit}" >/dev/null ||
		die "revision \"$rev\" is not a commit"
done
echo "old: $old_rev = $(describe "$old_rev")"
echo "new: $new_rev = $(describe "$new_rev")"
build_rev old "$old_rev"
build_rev new "$new_rev"
(cd "$script_dir" && go build -o "$build/benchfmt" ./benchfmt) || die "building the benchfmt helper failed"

{
	echo "old: $old_rev = $(describe "$old_rev")"
	echo "new: $new_rev = $(describe "$new_rev")"
	echo "pairs: $pairs, quick: $is_quick, workloads: ${workloads[*]}"
	echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "machine: $(uname -srm), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
} >"$out/meta.txt"
echo "output: $out"
[ "$pairs" -ge 4 ] || echo "note: with fewer than 4 pairs no difference can reach p < 0.05"
: >"$out/old.txt"
: >"$out/new.txt"
: >"$out/warnings.txt"

# run_one SIDE WORKLOAD PAIR
run_one() {
	local side=$1 w=$2 i=$3 args base start end
	if [ "$is_quick" = 1 ]; then args=${quick[$w]}; else args=${full[$w]}; fi
	base=$out/$w-$side-$i
	local cmd=("$build/$side" -json)
	[ -z "$qdir" ] || cmd+=(-dir "$qdir")
	# shellcheck disable=SC2206 # the arguments are words by design
	cmd+=($args)
	echo "walq-bench -json ${qdir:+-dir $qdir }$args" >"$base.cmd"
	start=$EPOCHREALTIME
	if ! "${cmd[@]}" >"$base.json" 2>"$base.stderr"; then
		echo "$prog: run failed: $side ($([ "$side" = old ] && echo "$old_rev" || echo "$new_rev")) $w, pair $i:" >&2
		echo "  $(cat "$base.cmd")" >&2
		sed 's/^/  | /' "$base.stderr" | tail -20 >&2
		echo "  output kept in $out" >&2
		exit 1
	fi
	end=$EPOCHREALTIME
	local line
	line=$("$build/benchfmt" line "${bench[$w]}" "$base.json" 2> >(tee -a "$out/warnings.txt" >&2)) ||
		die "could not read the result of $side $w, pair $i ($base.json)"
	echo "$line" >>"$out/$side.txt"
	printf '[%d/%d] %-3s %-16s %5.1fs  %s\n' "$i" "$pairs" "$side" "$w" "$(awk "BEGIN { print $end - $start }")" "${line#* 1 }"
}

# Interleaved: each workload runs with one binary, then the other, pair
# after pair; which one goes first alternates (old-new, new-old, ...) so
# that neither always runs right after the other's load.
for ((i = 1; i <= pairs; i++)); do
	for w in "${workloads[@]}"; do
		if ((i % 2 == 1)); then
			run_one old "$w" "$i"
			run_one new "$w" "$i"
		else
			run_one new "$w" "$i"
			run_one old "$w" "$i"
		fi
	done
done
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$out/meta.txt"

(cd "$out" && "$benchstat" old.txt new.txt >benchstat.txt 2>benchstat.stderr &&
	"$benchstat" -format csv old.txt new.txt >benchstat.csv 2>>benchstat.stderr) ||
	die "benchstat failed; see $out/benchstat.stderr"
(cd "$out" && "$build/benchfmt" verdict benchstat.csv >verdict.txt) || die "could not read benchstat's CSV output"

echo
cat "$out/meta.txt"
echo
cat "$out/benchstat.txt"
echo
echo "Per figure: which way is better; WORSE or better only where p < 0.05"
cat "$out/verdict.txt"
if [ -s "$out/warnings.txt" ]; then
	echo
	echo "warnings:"
	sort -u "$out/warnings.txt"
fi
echo
echo "output: $out"
