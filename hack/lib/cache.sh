# Shared by hack/*/build.sh (sourced, not run): one build per cache folder
# at a time, and a build that says what it does, why, for how long, and
# whom it waits for. Messages go to stderr; the scripts' stdout stays the
# one line their callers read (the folder built).

# cache_lock DIR WHAT takes DIR/.lock on file descriptor 9 (held until the
# script exits). When another build holds it, it says so with that
# process's PID and what it builds, and reminds every minute while it
# waits. Then it writes its own PID into the lock file for the next one.
cache_lock() {
  local dir=$1 what=$2
  local lock=$dir/.lock
  mkdir -p "$dir"
  exec 9<>"$lock"
  if ! flock -n 9; then
    local holder t0=$SECONDS
    holder=$(head -n 1 "$lock" 2>/dev/null || true)
    echo "$what: waiting for another build of the same cache to finish: ${holder:-a process that left no PID} (lock $lock)" >&2
    while ! flock -w 60 9; do
      echo "$what: still waiting after $((SECONDS - t0)) s for ${holder:-the other build} (lock $lock)" >&2
    done
    echo "$what: the other build finished after $((SECONDS - t0)) s" >&2
  fi
  printf 'PID %s (%s, since %s)\n' "$$" "$what" "$(date '+%H:%M:%S')" >"$lock"
}

# cache_why DIR KEY says why DIR/KEY is being built: no build at all yet,
# or the inputs of the cached one changed.
cache_why() {
  local dir=$1 key=$2 others
  others=$(find "$dir" -mindepth 1 -maxdepth 1 -type d ! -name '*.tmp' ! -name "$key" 2>/dev/null | wc -l)
  if [ "$others" -gt 0 ]; then
    echo "its pinned versions or build script changed since the cached build (new cache key $key)"
  else
    echo "nothing is cached in $dir yet (a first build on this machine or for this user)"
  fi
}

# cache_start WHAT TARGETS DIR KEY ESTIMATE announces a build, and
# cache_done WHAT says how long it took.
cache_start() {
  _cache_t0=$SECONDS
  echo "$1: building $2 into $3/$4, because $(cache_why "$3" "$4"); expect $5" >&2
}
cache_done() {
  echo "$1: built in $((SECONDS - _cache_t0)) s" >&2
}

# cache_key SCRIPT FILE... prints the cache key: a hash of the files the
# build is made of and of SCRIPT's commands, without its comments,
# messages and locking, so that editing those rebuilds nothing.
cache_key() {
  local script=$1
  shift
  { cat "$@"; grep -vE '^[[:space:]]*(#|$|echo |cache_[a-z_]+ |\. )' "$script"; } | sha256sum | cut -c1-16
}
