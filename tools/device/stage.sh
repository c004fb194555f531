#!/usr/bin/env bash
# The working tree travels to the device machine with every call, under a 64 MiB limit; the parity
# fixtures alone are ~55 MB. `stage.sh out [KEEP ...]` moves the fixture folders (but the
# tests/fixtures/KEEP model folders and tests/KEEP fixture folders named) and the bench logs to a stash outside the repository;
# `stage.sh back` restores them. Run `back` after every call, and check `git status` is clean.
set -euo pipefail
cd "$(dirname "$0")/../.."
stash=${VKF_STASH:-/tmp/vkformers-device-stash}
case ${1:-} in
out)
    shift
    [[ ! -e "$stash" ]] || { echo "stage.sh: $stash exists: run 'stage.sh back' first" >&2; exit 1; }
    mkdir -p "$stash/fixtures"
    for d in tests/fixtures_*/ docs/bench/; do
        keep=0
        for k in "$@"; do [[ "$(basename "$d")" == "$k" ]] && keep=1; done
        [[ $keep == 1 ]] && continue
        mkdir -p "$stash/$(dirname "$d")"
        mv "$d" "$stash/$d"
    done
    for f in tests/fixtures/*; do
        keep=0
        for k in "$@"; do [[ "$(basename "$f")" == "$k" ]] && keep=1; done
        [[ $keep == 1 ]] || mv "$f" "$stash/fixtures/"
    done
    du -sh --exclude=target --exclude=.git --exclude=.dev --exclude=.gl --exclude=.whl . ;;
back)
    [[ -d "$stash" ]] || { echo "stage.sh: nothing staged" >&2; exit 0; }
    mv "$stash"/fixtures/* tests/fixtures/ 2>/dev/null || true
    for d in "$stash"/tests/fixtures_* "$stash"/docs/bench; do
        [[ -e "$d" ]] && mv "$d" "${d#"$stash"/}"
    done
    rm -rf "$stash"
    git status --short | head ;;
*)
    echo "usage: stage.sh out [KEEP ...] | back" >&2
    exit 2 ;;
esac
