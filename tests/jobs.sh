# Sourced by run.sh, fuzz.sh and matrix.sh: a bounded set of background jobs, each recording its
# exit status in a file, so that the caller can report them afterwards in the order it started them.
#   jobs_limit VALUE           VALUE when it is a number >= 1, else the number of CPUs (1 if unknown)
#   jobs_start MAX RCFILE CMD  waits until fewer than MAX jobs run, then runs CMD (a program or a
#                              shell function, with its arguments) in the background; its exit
#                              status goes to RCFILE
#   jobs_rc RCFILE             that status, 99 when the file is missing (the job did not finish)
# The caller runs `wait` before reading the status files.

jobs_limit() {
    local n=${1:-}
    [ -n "$n" ] || n=$(nproc 2>/dev/null || echo 1)
    [ "$n" -ge 1 ] 2>/dev/null || n=1
    echo "$n"
}

jobs_start() {
    local max=$1 rc=$2
    shift 2
    rm -f "$rc"
    while [ "$(jobs -rp | wc -l)" -ge "$max" ]; do wait -n 2>/dev/null || break; done
    ( "$@"; echo $? > "$rc" ) &
}

jobs_rc() {
    cat "$1" 2>/dev/null || echo 99
}
