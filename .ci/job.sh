# .ci/job.sh -- one job of the scripts that run inside a chroot
# (.ci/freethreaded-inside.sh, .ci/native-inside.sh); sourced, not run.
#
#   JOBS="a b"; source job.sh    only the jobs whose function is named in
#                                JOBS run (all of them when it is empty)
#   job "what it proves" function
#                                run the function with errexit on, time it,
#                                print PASS/FAIL; `fails` counts the failures
fails=0

job() {
    local name=$1 start rc
    shift
    [[ " ${JOBS:-$1} " == *" $1 "* ]] || return 0
    echo "-- $name [$(date +%H:%M:%S)]"
    start=$(date +%s)
    ( set -e; "$@" )
    rc=$?
    echo "-- $name: $( ((rc == 0)) && echo PASS || echo "FAIL (exit $rc)") in $(( $(date +%s) - start ))s"
    ((rc == 0)) || fails=$((fails + 1))
}
