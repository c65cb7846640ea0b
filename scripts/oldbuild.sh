#!/usr/bin/env bash
# oldbuild.sh DIR [REV...]: open the queue directory DIR with old builds of
# walq (default: 82292fa, the first product, and 4fb10c1, the build before
# format 2) and print what each said and whether it changed anything.
#
# Each REV is extracted from this repository's git history (git archive), a
# small main that calls walq.Open(dir, walq.Options{}) (and Close if it
# opened) is added as cmd/oldopen, and it is built with go build -trimpath.
# The builds run on a copy of DIR (cp -a), one fresh copy per build, never on
# DIR itself, unless --in-place is given. A manifest (path, type, mode, size,
# mtime, inode, link count, sha256 of contents) is taken before and after
# each open and compared.
#
# Exit status: 0 when every build refused DIR and changed nothing, 1 when one
# opened it or changed something, 2 on a usage or build problem.
#
# Needs git with the history (not a shallow clone), go, and GNU find and
# coreutils.
set -euo pipefail

usage() {
	echo "usage: $0 [--in-place] DIR [REV...]" >&2
	exit 2
}

inplace=false
if [ "${1:-}" = "--in-place" ]; then
	inplace=true
	shift
fi
[ $# -ge 1 ] || usage
dir=$1
shift
[ -d "$dir" ] || { echo "$0: $dir is not a directory" >&2; exit 2; }
dir=$(cd "$dir" && pwd)
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(82292fa 4fb10c1)

repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/walq-oldbuild.XXXXXX")
trap 'rm -rf "$work"' EXIT

for rev in "${revs[@]}"; do
	if ! git -C "$repo" cat-file -e "$rev^{commit}" 2>/dev/null; then
		echo "$0: revision $rev is not in $repo (shallow clone? git fetch --unshallow)" >&2
		exit 2
	fi
done

# manifest DIR: one line per entry, sorted; the sha256 of each regular file.
manifest() {
	(
		cd "$1"
		find . -printf '%p\t%y\t%m\t%s\t%T@\t%i\t%n\t%l\n' | LC_ALL=C sort
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum
	)
}

# Build every revision, all at once.
pids=()
for rev in "${revs[@]}"; do
	tree="$work/src-$rev"
	mkdir -p "$tree/cmd/oldopen"
	git -C "$repo" archive "$rev" | tar -x -C "$tree"
	cat >"$tree/cmd/oldopen/main.go" <<'EOF'
package main

import (
	"fmt"
	"os"

	"github.com/walq/walq"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: oldopen DIR")
		os.Exit(2)
	}
	q, err := walq.Open(os.Args[1], walq.Options{})
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	fmt.Println("opened")
	if err := q.Close(); err != nil {
		fmt.Println("close:", err)
	}
}
EOF
	(cd "$tree" && GOWORK=off go build -trimpath -mod=mod -o "$work/oldopen-$rev" ./cmd/oldopen >"$work/build-$rev.log" 2>&1) &
	pids+=($!)
done
for i in "${!revs[@]}"; do
	if ! wait "${pids[$i]}"; then
		echo "$0: building ${revs[$i]} failed:" >&2
		cat "$work/build-${revs[$i]}.log" >&2
		exit 2
	fi
done

status=0
for rev in "${revs[@]}"; do
	if $inplace; then
		target=$dir
	else
		target="$work/copy-$rev/$(basename "$dir")"
		mkdir -p "$(dirname "$target")"
		cp -a "$dir" "$target"
	fi
	echo "== $rev on $target"
	manifest "$target" >"$work/before-$rev"
	set +e
	out=$("$work/oldopen-$rev" "$target" 2>&1)
	code=$?
	set -e
	echo "exit $code: $out"
	manifest "$target" >"$work/after-$rev"
	if [ "$code" -ne 1 ]; then
		echo "NOT REFUSED (exit $code)"
		status=1
	fi
	if diff -u "$work/before-$rev" "$work/after-$rev" >"$work/diff-$rev"; then
		echo "unchanged"
	else
		echo "CHANGED (manifest fields: path type mode size mtime inode links link-target; then sha256):"
		tail -n +3 "$work/diff-$rev"
		status=1
	fi
done
exit $status
