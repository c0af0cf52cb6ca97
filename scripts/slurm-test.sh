#!/usr/bin/env bash
# Slurm, for real, on this one machine: installs Debian's slurm-wlm and munge (only what is
# missing), writes a one-node slurm.conf into a temporary folder, starts munged, slurmctld
# and slurmd from it, and submits jobs/gssp.sbatch with `sbatch --wait`:
#
#   1. the main job, configs/fashion_mnist_gssp.toml on its 6 ranks (1 epoch);
#   2. the same config on 10 ranks (2 servers + 8 workers in two speed tiers, 0.5 epochs):
#      more ranks than this machine has cores (`sbatch --overcommit`), placed by the config
#      (`cluster.distribution = "cyclic"`: the launcher must be given it),
#   3. the main job requeued (`scontrol requeue`) after its first checkpoint: it resumes
#      from the checkpoint under the same job id and completes.
#
# For each it checks the exit status, the job's state in Slurm, Slurm's log of the job
# (gssp-<job id>.out) and the run directory runs/<job id>-fashion_mnist_gssp (summary.json,
# eval.csv, model.safetensors), then moves the log into the run directory. It stops the
# daemons it started on exit, also on failure (the temporary folder with the daemons' logs
# is kept then). Needs root (munged runs as the munge user, slurmd as root, jobs as root).
#
#   ./scripts/slurm-test.sh            # everything
#   ./scripts/slurm-test.sh --smoke    # only the daemons and trivial jobs (hostname, srun)
#
# Environment: SLURM_TEST_NICE (niceness of the daemons and so of every job step, default
# 19), SLURM_TEST_PORT (slurmctld's port, slurmd takes the next one; default 6817).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

smoke=0
case "${1:-}" in
    --smoke) smoke=1 ;;
    "") ;;
    *) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac

say() { echo "slurm-test: $*"; }
die() { echo "slurm-test: FAIL: $*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
    echo "slurm-test: run it as root (it installs packages and starts munged, slurmctld and slurmd)" >&2
    exit 2
fi
for d in slurmctld slurmd; do
    if pgrep -x "$d" >/dev/null; then
        echo "slurm-test: a $d is already running on this machine; this test starts its own" \
             "one-node cluster and is not meant for a machine that is part of one" >&2
        exit 2
    fi
done

nice_level=${SLURM_TEST_NICE:-19}
ctld_port=${SLURM_TEST_PORT:-6817}
slurmd_port=$((ctld_port + 1))
t0=$(date +%s)

# --- packages -----------------------------------------------------------------------------
# slurm-wlm pulls in slurmctld, slurmd, slurm-client and the plugins (mpi/pmix among them).
packages=(slurm-wlm slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    # Without systemd, the packages' scripts would start a system munged (munge's init
    # script; slurmd's and slurmctld's find no /etc/slurm/slurm.conf and do nothing) that
    # this test does not use: a temporary policy-rc.d forbids service starts meanwhile,
    # where the machine has none of its own.
    policy=/usr/sbin/policy-rc.d added_policy=0 apt_status=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# scripts/slurm-test.sh: no service starts while it installs packages\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        added_policy=1
    fi
    apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || apt_status=$?
    [ "$added_policy" -eq 0 ] || rm -f "$policy"
    [ "$apt_status" -eq 0 ] || die "apt-get failed (exit status $apt_status)"
fi
# The build and the Fashion-MNIST package (a no-op when both are there).
./scripts/setup.sh
# As root, and for the mpirun fallback of jobs/gssp.sbatch: sbatch passes the submitting
# environment (these variables, SLURM_CONF) on to the job.
# shellcheck source=scripts/env.sh
source scripts/env.sh

# The munge key: Debian's munge package creates one; make it when it is missing.
key=/etc/munge/munge.key
if [ ! -s "$key" ]; then
    say "creating $key"
    install -d -o munge -g munge -m 0700 /etc/munge
    mungekey --create --keyfile="$key"
    chown munge:munge "$key"
    chmod 0400 "$key"
fi

# --- configuration ------------------------------------------------------------------------
state=$(mktemp -d /tmp/gssp-slurm.XXXXXX)
chmod 0755 "$state"
# munged wants its socket folder searchable by all (clients connect there).
install -d -o munge -g munge -m 0755 "$state/munge"
mkdir -p "$state/ctld" "$state/spool"
host=$(hostname -s)
conf=$state/slurm.conf
export SLURM_CONF=$conf

# The node as slurmd sees it (CPUs, sockets, cores, threads, memory), named as this host;
# its CPUs (nproc's count, unless an affinity mask hides some) decide where a job needs
# --overcommit.
hw=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //')
cpus=$(sed -n 's/^CPUs=\([0-9][0-9]*\) .*/\1/p' <<<"$hw")
[ -n "$cpus" ] || die "cannot read the CPU count from slurmd -C: $hw"
# Job ids go on from the highest one already in runs/ or in a gssp-<id>.out here, so that a
# new job never lands in an earlier test's run directory (this controller starts from a
# fresh state folder every time).
first_id=1
for f in runs/[0-9]*-* gssp-[0-9]*.out; do
    [ -e "$f" ] || continue
    n=$(basename "$f" | sed -E 's/^(gssp-)?([0-9]+).*/\2/')
    [ "$n" -lt "$first_id" ] || first_id=$((n + 1))
done

cat >"$conf" <<EOF
# One-node cluster for scripts/slurm-test.sh (written $(date -u +%FT%TZ)).
ClusterName=gssptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
# Our own munged, on a socket in this folder (a system munged, if any, is left alone).
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$state/munge/munge.socket
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
FirstJobId=$first_id
# No cgroups: processes are tracked through /proc and tasks are not bound to cores, which
# works in containers without systemd or a delegated cgroup tree.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Tasks keep the daemons' niceness (PropagatePrioProcess=0, the default).
PropagatePrioProcess=0
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
# Do not drain the node when the hardware slurmd finds differs from the line below.
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 $hw State=UNKNOWN
# A job with more tasks than CPUs is submitted with --overcommit (one CPU per node is then
# allocated, and srun starts all tasks). Without it such a job stays pending with
# Reason=PartitionConfig; OverSubscribe=FORCE would not help (it shares CPUs between jobs,
# not between the tasks of one job).
PartitionName=gssp Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

# PMIx's per-step client folders (spmix_appdir_<uid>_<job>.<step>) go into this state folder,
# not /tmp: job ids start again from FirstJobId with every fresh controller, and a folder
# left in /tmp by a test that was killed mid-step would make the same step id fail to launch.
mkdir -p "$state/pmix"
cat >"$state/mpi.conf" <<EOF
PMIxCliTmpDirBase=$state/pmix
EOF

# --- daemons ------------------------------------------------------------------------------
pids=()     # "name:pid" of each daemon this script started
jobs_submitted=()
keep_state=1

stop_daemons() {
    local status=$?
    set +e
    trap - EXIT INT TERM
    if [ ${#jobs_submitted[@]} -gt 0 ] && [ ${#pids[@]} -gt 0 ]; then
        local left
        left=$(squeue -h -o %i 2>/dev/null)
        if [ -n "$left" ]; then
            say "cancelling jobs still in the queue: $(echo "$left" | tr '\n' ' ')"
            # shellcheck disable=SC2086
            scancel $left
            for _ in $(seq 30); do
                [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
                sleep 1
            done
        fi
    fi
    # Stop in reverse order: slurmd, slurmctld, munged.
    local i name pid
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        name=${pids[i]%%:*}
        pid=${pids[i]#*:}
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            say "$name (pid $pid) ignored SIGTERM; killing it"
            kill -KILL "$pid" 2>/dev/null
        fi
        wait "$pid" 2>/dev/null
    done
    if [ ${#pids[@]} -gt 0 ]; then
        say "stopped ${pids[*]}"
    fi
    if [ "$status" -ne 0 ]; then
        for log in "$state/slurmctld.log" "$state/slurmd.log"; do
            [ -f "$log" ] || continue
            echo "---- last lines of $log ----" >&2
            tail -n 25 "$log" >&2
        done
    fi
    if [ "$status" -eq 0 ] && [ "$keep_state" -eq 0 ]; then
        rm -rf "$state"
    else
        say "daemon logs and state kept in $state"
    fi
    exit "$status"
}
trap stop_daemons EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local limit=$1
    shift
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.5
    done
}
# Fails when the daemon started last has exited.
alive() {
    local last=${pids[-1]}
    kill -0 "${last#*:}" 2>/dev/null || die "${last%%:*} exited; see $state/${last%%:*}.log and $state/${last%%:*}.out"
}
port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
for p in "$ctld_port" "$slurmd_port"; do
    port_free "$p" || die "port $p is in use (set SLURM_TEST_PORT to another one)"
done

say "Slurm $(sinfo -V | awk '{print $2}'), munge $(munged -V | awk '{print $1}' | sed 's/munge-//'); node $host, $cpus cores; state in $state"
# Foreground daemons (-F, -D) in the background: $! is the daemon itself (setpriv and nice
# exec it), and stop_daemons stops exactly these.
setpriv --reuid=munge --regid=munge --clear-groups nice -n "$nice_level" \
    munged -F --key-file="$key" --socket="$state/munge/munge.socket" \
    --pid-file="$state/munge/munged.pid" --log-file="$state/munge/munged.log" \
    --seed-file="$state/munge/munged.seed" >"$state/munged.out" 2>&1 &
pids+=("munged:$!")
wait_for 15 bash -c "munge -n -S '$state/munge/munge.socket' | unmunge -S '$state/munge/munge.socket'" \
    || { alive; die "munged does not answer on $state/munge/munge.socket"; }
alive

nice -n "$nice_level" slurmctld -D -c -f "$conf" >"$state/slurmctld.out" 2>&1 &
pids+=("slurmctld:$!")
wait_for 30 scontrol ping || { alive; die "slurmctld does not answer (scontrol ping)"; }
alive

nice -n "$nice_level" slurmd -D -f "$conf" -N "$host" >"$state/slurmd.out" 2>&1 &
pids+=("slurmd:$!")
node_idle() { [ "$(sinfo -h -n "$host" -o %T)" = idle ]; }
wait_for 60 node_idle || { alive; sinfo -N -l >&2; die "node $host is not idle after 60 s"; }
alive
say "daemons up ($(( $(date +%s) - t0 )) s): $(sinfo -h -o '%P %a %D %T %C')"

# --- trivial jobs -------------------------------------------------------------------------
jobs_submitted+=(smoke)
out=$(mktemp "$state/smoke.XXXXXX")
timeout 120 sbatch --wait --quiet --time=00:01:00 --output="$out" \
    --wrap 'echo "host $(hostname -s) user $(id -un) nice $(nice)"' \
    || die "sbatch --wrap hostname failed; its output: $(cat "$out")"
say "batch job: $(cat "$out")"
grep -q "^host $host " "$out" || die "the batch job did not run on $host: $(cat "$out")"
# More tasks than CPUs in one job step.
ntrivial=$((cpus + 2))
timeout 120 sbatch --wait --quiet --time=00:01:00 --output="$out" --ntasks="$ntrivial" --overcommit \
    --wrap 'srun hostname' || die "srun with $ntrivial tasks failed; its output: $(cat "$out")"
[ "$(grep -c "^$host\$" "$out")" -eq "$ntrivial" ] \
    || die "srun ran $(grep -c "^$host\$" "$out") of $ntrivial tasks: $(cat "$out")"
say "srun with $ntrivial tasks on $cpus cores: ok"
say "MPI plugins: $(srun --mpi=list 2>&1 | grep -E '^[[:space:]]' | tr -d '\t ' | tr '\n' ' ')"

if [ "$smoke" -eq 1 ]; then
    keep_state=0
    say "smoke test passed in $(( $(date +%s) - t0 )) s"
    exit 0
fi

# --- gssp jobs ----------------------------------------------------------------------------
config=configs/fashion_mnist_gssp.toml
name=$(basename "$config" .toml)
declared=$(sed -n 's/^#[[:space:]]*ranks:[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' "$config" | head -n 1)
summaries=()

# run_job LABEL MIN_ACCURACY NTASKS [KEY=VALUE ...]: submits jobs/gssp.sbatch with the
# config and overrides, waits for it and checks it.
run_job() {
    local label=$1 min_acc=$2 ntasks=$3
    shift 3
    local opts=(--wait --parsable --ntasks="$ntasks" --time=00:10:00)
    # More tasks than CPUs: the allocation then counts one CPU per node, not per task.
    [ "$ntasks" -le "$cpus" ] || opts+=(--overcommit)
    say "$label: sbatch ${opts[*]} jobs/gssp.sbatch $config $*"
    local start=$SECONDS status=0 id
    id=$(timeout 600 sbatch "${opts[@]}" jobs/gssp.sbatch "$config" "$@") || status=$?
    jobs_submitted+=("$id")
    id=${id%%;*}
    local secs=$((SECONDS - start))
    local log=gssp-$id.out run=runs/$id-$name
    if [ "$status" -ne 0 ]; then
        [ -f "$log" ] && { echo "---- $log ----" >&2; tail -n 40 "$log" >&2; }
        die "$label: sbatch --wait exited with $status (job ${id:-not submitted})"
    fi
    [[ "$id" =~ ^[0-9]+$ ]] || die "$label: sbatch printed no job id: '$id'"
    local job_state
    job_state=$(scontrol show job "$id" | grep -oE 'JobState=[A-Z_]+|ExitCode=[0-9:]+' | tr '\n' ' ')
    case "$job_state" in
        "JobState=COMPLETED ExitCode=0:0 ") ;;
        *) die "$label: job $id: $job_state" ;;
    esac
    [ -f "$log" ] || die "$label: Slurm's log $repo/$log is missing"
    local launcher result acc
    launcher=$(sed -n 's/^gssp.sbatch: \([a-z]*\( --mpi=[a-z0-9]*\)\?\) .*/\1/p' "$log" | head -n 1)
    result=$(grep -E '^gssp .* test accuracy [0-9.]+% after' "$log" | tail -n 1) \
        || { tail -n 40 "$log" >&2; die "$label: no final accuracy line in $log"; }
    grep -q "exit status 0" "$log" || die "$label: $log does not report exit status 0"
    # A stated placement reaches the launcher (srun --distribution, or mpirun --map-by).
    local kv dist map
    for kv in "$@"; do
        [[ "$kv" == cluster.distribution=* ]] || continue
        dist=${kv#*=}
        case "$dist" in block) map=slot ;; *) map=node ;; esac
        grep -Eq "^gssp.sbatch: .*(--distribution=$dist|--map-by $map) " "$log" \
            || die "$label: the launcher was not placed $dist: $(grep -m 1 '^gssp.sbatch: ' "$log")"
    done
    if grep -q "warning: the job has" "$log" && [ "$ntasks" -eq "$declared" ]; then
        die "$label: gssp.sbatch warned about the task count: $(grep 'warning' "$log")"
    fi
    for f in summary.json eval.csv model.safetensors config.toml; do
        [ -s "$run/$f" ] || die "$label: $run/$f is missing or empty"
    done
    acc=$(sed -E 's/.* test accuracy ([0-9.]+)%.*/\1/' <<<"$result")
    awk -v a="$acc" -v m="$min_acc" 'BEGIN { exit !(a >= 100 * m) }' \
        || die "$label: test accuracy $acc% is below the sanity bound $(awk -v m="$min_acc" 'BEGIN{print 100*m}')%"
    grep -q '"final_test_accuracy"' "$run/summary.json" || die "$label: $run/summary.json has no final_test_accuracy"
    mv "$log" "$run/slurm-$id.out"
    say "$label: ok in $secs s: job $id, $ntasks ranks on $cpus cores via ${launcher:-?}, $job_state"
    say "  $result"
    summaries+=("$label: job $id, $ntasks ranks, ${launcher:-?}, ${secs} s, test accuracy $acc%, $run (Slurm log: $run/slurm-$id.out)")
}

# 1. The main job: its 6 ranks (2 group servers + 4 workers in tiers 1x, 2x), one epoch.
# Accuracy bounds: a few points under what a correct run reaches (chance is 10%).
run_job "main job" 0.78 "$declared" run.epochs=1
# 2. More ranks than cores: 2 group servers + 8 workers (4 at 1x, 4 at 2x) on 10 ranks,
#    placed as a config states it (`cluster.nodes`, `cluster.distribution`: the one node,
#    cyclic), which gssp.sbatch hands the launcher.
run_job "10 ranks" 0.70 10 run.epochs=0.5 \
    "heterogeneity.tiers=[{factor=1.0, workers=4}, {factor=2.0, workers=4}]" \
    cluster.nodes=1 cluster.distribution=cyclic

# 3. Requeue: a job killed by `scontrol requeue` after its first checkpoint keeps its job id
#    and run directory; gssp.sbatch resumes it from the checkpoint, and it completes.
requeue_job() {
    local label="requeue" id run log job_state start=$SECONDS
    local opts=(--parsable --ntasks="$declared" --time=00:10:00)
    [ "$declared" -le "$cpus" ] || opts+=(--overcommit)
    say "$label: sbatch ${opts[*]} jobs/gssp.sbatch $config run.epochs=1 run.checkpoint_every_s=3"
    id=$(sbatch "${opts[@]}" jobs/gssp.sbatch "$config" run.epochs=1 run.checkpoint_every_s=3) \
        || die "$label: sbatch failed"
    id=${id%%;*}
    jobs_submitted+=("$id")
    run=runs/$id-$name
    log=gssp-$id.out
    wait_for 180 test -f "$run/checkpoints/latest" || {
        [ -f "$log" ] && tail -n 40 "$log" >&2
        die "$label: no checkpoint in $run after 180 s"
    }
    scontrol requeue "$id" || die "$label: scontrol requeue $id failed"
    say "$label: job $id requeued after checkpoint $(cat "$run/checkpoints/latest")"
    # Slurm holds a requeued batch job back for about two minutes (its credential of the
    # first start is revoked meanwhile; starting it sooner fails the job): wait for that.
    local deadline=$((SECONDS + 400))
    while :; do
        job_state=$(scontrol show job "$id" | grep -oE 'JobState=[A-Z_]+' | head -n 1)
        case "$job_state" in
            JobState=COMPLETED) break ;;
            JobState=FAILED | JobState=CANCELLED | JobState=TIMEOUT | JobState=NODE_FAIL)
                [ -f "$log" ] && tail -n 40 "$log" >&2
                die "$label: job $id ended $job_state" ;;
        esac
        [ "$SECONDS" -lt "$deadline" ] || die "$label: job $id not completed after its requeue ($job_state)"
        sleep 1
    done
    local restarts
    restarts=$(scontrol show job "$id" | grep -oE 'Restarts=[0-9]+')
    [ "$restarts" != "Restarts=0" ] || die "$label: job $id was not restarted ($restarts)"
    grep -q "has checkpoint .* resuming it" "$log" || { tail -n 40 "$log" >&2; die "$label: $log shows no resume"; }
    grep -q "resuming $run from checkpoint" "$log" || die "$label: gssp did not resume $run"
    grep -qE '^gssp .* test accuracy [0-9.]+% after' "$log" || die "$label: no final accuracy line in $log"
    [ -s "$run/summary.json" ] || die "$label: $run/summary.json is missing"
    mv "$log" "$run/slurm-$id.out"
    say "$label: ok in $((SECONDS - start)) s: job $id, $restarts, resumed from its checkpoint and completed"
    summaries+=("$label: job $id, $restarts, resumed, $(grep -oE 'test accuracy [0-9.]+%' "$run/slurm-$id.out" | tail -n 1)")
}
requeue_job

keep_state=0
say "passed in $(( $(date +%s) - t0 )) s"
for s in "${summaries[@]}"; do
    say "  $s"
done
